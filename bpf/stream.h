/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Stream records: layouts shared by stream.bpf.c and the Go decoder.
 * (To be folded into tokenwire.h.) */
#ifndef TOKENWIRE_STREAM_H
#define TOKENWIRE_STREAM_H

#define TW_PEEK_MAX 512      /* bytes of a request segment or response head kept */
#define TW_GAP_BUCKETS 17    /* chunk-interval histogram: 16 bounds + overflow */

/* Where a stream is in its life, per server socket. */
enum tw_stream_state {
	TW_ST_IDLE = 0,     /* connected, no request in flight */
	TW_ST_REQUEST = 1,  /* request bytes arrived, no response yet */
	TW_ST_RESPONSE = 2, /* response started */
};

/* Record kinds (first field of every stream record after the id). */
enum tw_stream_record {
	TW_REC_REQUEST = 1,  /* a slice of the request's bytes */
	TW_REC_RESPONSE = 2, /* the head of the response's first write */
	TW_REC_PROGRESS = 3, /* chunk-interval counts so far, for long streams */
	TW_REC_END = 4,      /* the stream ended */
	TW_REC_CHUNK = 5,    /* one body chunk (only with chunk_records on) */
};

/* Why a stream ended. */
enum tw_end_reason {
	TW_END_TERMINATOR = 1,   /* 0\r\n\r\n or data: [DONE] written */
	TW_END_NEXT_REQUEST = 2, /* the next request arrived on the socket */
	TW_END_CLOSE = 3,        /* the server closed the connection */
	TW_END_CLIENT_CLOSED = 4,/* the client closed its side mid-stream */
	TW_END_RESET = 5,        /* the connection was reset */
	TW_END_IDLE = 6,         /* no write for streams.idle_timeout (set by user space) */
	TW_END_NO_RESPONSE = 7,  /* the connection ended before any response */
};

/* Flags of a response record. */
enum tw_response_flag {
	TW_RESP_HTTP = 1 << 0, /* the write starts with "HTTP/1." */
};

/* Identifies a stream: the socket and the request's number on it. */
struct stream_key {
	__u64 sock;
	__u32 seq;
	__u8 kind; /* enum tw_stream_record */
	__u8 reason; /* enum tw_end_reason (END), flags (RESPONSE) */
	__u16 len; /* valid bytes in data (REQUEST, RESPONSE) */
};

/* REQUEST and RESPONSE: bytes peeked from the socket. */
struct stream_payload {
	struct stream_key id;
	__u64 ts_ns;
	__u32 offset; /* REQUEST: offset of data in the request */
	__u32 total;  /* REQUEST: bytes read; RESPONSE: bytes of the write */
	__u32 pid;    /* RESPONSE: the writing process (tgid) */
	__u32 _pad;
	char comm[16];
	__u8 data[TW_PEEK_MAX];
};

/* PROGRESS, END and CHUNK. */
struct stream_stats {
	struct stream_key id;
	__u64 req_ts;         /* last request byte reached the socket */
	__u64 headers_ts;     /* first response write */
	__u64 first_chunk_ts; /* first body chunk written */
	__u64 last_chunk_ts;  /* CHUNK: this chunk */
	__u64 end_ts;         /* END: when it ended */
	__u64 bytes;          /* body bytes written so far (CHUNK: this chunk) */
	__u64 gap_sum_ns;     /* sum of chunk intervals so far */
	__u64 gap_max_ns;     /* longest chunk interval so far */
	__u32 chunks;         /* body chunks so far */
	__u32 pid;
	__u32 gap_counts[TW_GAP_BUCKETS]; /* chunk intervals since the previous PROGRESS */
	/* http mode: bytes of the first write (status line, headers and maybe
	 * the first body bytes; user space splits them, see stream.Stats). */
	__u32 head_bytes;
	__u8 saddr[16];       /* server (local) address */
	__u8 daddr[16];       /* client address */
	__u16 sport;          /* server port, host order */
	__u16 dport;          /* client port, host order */
	__u16 family;
	__u16 _pad2;
};

enum tw_stream_counter {
	TW_ST_COUNTER_RINGBUF_LOST = 0,
	TW_ST_COUNTER_NEW_SOCKETS,     /* sockets that started being tracked */
	TW_ST_COUNTER_TRACK_FAILED,    /* state insert failed */
	TW_ST_COUNTER_MAX,
};

#endif
