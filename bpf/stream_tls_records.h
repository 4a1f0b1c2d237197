/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams: TLS connections no uprobe reads, timed from their record
 * headers (5 bytes each: content type, version, length), which the socket
 * hooks read from the syscall's buffers like any other bytes: a server's
 * reads and writes, and a client's writes and reads (stream_client.h),
 * the same rules with the directions swapped.
 *
 * Handshake (22), change-cipher-spec (20) and alert (21) records are never
 * a request or a chunk. A request is the client's application data (23);
 * its time is when its bytes reached the socket. A response write is the
 * server's application data; every one is a chunk (opaque mode), the first
 * starts the response. TLS 1.3 encrypts more than application data as 23,
 * so three more rules, from what OpenSSL, Go and Node write:
 *   - an encrypted alert is 19 bytes (2 and the inner content type, a
 *     16-byte AEAD tag): close_notify is not a request nor a chunk;
 *   - the client's first encrypted records finish its handshake, up to its
 *     Finished (53 or 69 bytes: SHA-256 or SHA-384 suites; 45 or 61 with
 *     an 8-byte tag); a server that encrypted records before the client
 *     did is TLS 1.3;
 *   - a server write of two or more records of one small length before
 *     the first response is a session-ticket flight (OpenSSL and BoringSSL
 *     send two tickets at once), not the response's start; a client that
 *     reads them one at a time has the first held until the next one
 *     (client_first_records in stream_client.h).
 * Part of stream.bpf.c.
 */
#ifndef TOKENWIRE_STREAM_TLS_RECORDS_H
#define TOKENWIRE_STREAM_TLS_RECORDS_H

#define TLS_CT_CCS 20
#define TLS_CT_APPDATA 23
#define TLS_WALK 8              /* record headers read per read or write */
#define TLS13_ALERT_LEN 19      /* an encrypted alert */
#define TLS_TICKET_MAX_LEN 1024 /* a session ticket record is shorter */

/* tls_header reads the record header at p: its content type, or 0 when
 * the bytes are no TLS record header (the walk has lost its place). */
static __always_inline __u8 tls_header(const __u8 *p, __u32 *len)
{
	__u8 h[5];
	if (bpf_probe_read_user(h, sizeof(h), p) || h[0] < TLS_CT_CCS || h[0] > TLS_CT_APPDATA || h[1] != 3)
		return 0;
	*len = (__u32)h[3] << 8 | h[4];
	return h[0];
}

/* client_record says whether a record of the client's is application
 * data: a request. */
static __always_inline int client_record(struct stream_state *st, __u8 type, __u32 len)
{
	if (type != TLS_CT_APPDATA)
		return 0;
	st->cli_23 = 1;
	if (len == TLS13_ALERT_LEN)
		return 0;
	if (st->tls13 && !st->cli_fin) {
		if (len == 53 || len == 69 || len == 45 || len == 61 || ++st->fin_skips >= 4)
			st->cli_fin = 1;
		return 0;
	}
	return 1;
}

/* tls_request starts the request whose first application data was just
 * read; it reached the socket at st->rx_ts. */
static __always_inline void tls_request(const struct sock *sk, struct stream_state *st, __u64 now)
{
	__u64 arrived = st->rx_ts ? st->rx_ts : now;
	if (st->state == TW_ST_REQUEST) {
		st->req_ts = arrived; /* the last byte of the request wins */
		return;
	}
	end_stream(sk, st, TW_END_NEXT_REQUEST, arrived);
	begin_stream(st, arrived, now);
}

/* tls_next reads the header of the record at *off of base[0, avail): its
 * type, and its length into *len. 0 when the header is not all there, or
 * is not a record header: the walk is lost then, and *off moves to end, so
 * that the next read or write is looked at afresh. */
static __always_inline __u8 tls_next(const __u8 *base, __u64 *off, __u64 avail, __u64 end, __u32 *len)
{
	if (*off + 5 > avail)
		return 0;
	__u8 type = tls_header(base + *off, len);
	if (!type)
		*off = end;
	return type;
}

/* request_records walks the client's records in a read (server) or write
 * (client) of ret bytes, its first buffer, from where the previous one
 * left off (*left bytes into a record): whether it carried a request's
 * application data. */
static __always_inline int request_records(struct stream_state *st, __u64 ret, __u32 *left)
{
	__u64 off = *left;
	if (off >= ret) {
		*left = off - ret; /* all of it inside a record */
		return 0;
	}
	struct user_io io;
	if (syscall_io(&io))
		return 0;
	const __u8 *base = io.iov[0].iov_base;
	__u64 avail = io.iov[0].iov_len < ret ? io.iov[0].iov_len : ret;
	int app = 0;
	for (int i = 0; i < TLS_WALK; i++) {
		__u32 len;
		__u8 type = tls_next(base, &off, avail, ret, &len);
		if (!type)
			break;
		app |= client_record(st, type, len);
		off += 5 + len;
	}
	*left = off > ret ? off - ret : 0;
	return app;
}

/* What a walk of the server's records in one write or read saw. */
struct record_walk {
	__u32 begun; /* records whose header was in it */
	__u32 len0;  /* the first one's length */
	__u32 same;  /* all of them application data of that length */
};

/* response_records walks the server's records in a write (server) or
 * read (client) of ret bytes, its first buffer, from where the previous
 * one left off (*left bytes into a record, application data if *app):
 * whether it is a response's chunk, one that starts with application data
 * or continues such a record. */
static __always_inline int response_records(struct stream_state *st, __u64 ret, __u32 *left, __u8 *app_rec,
					    struct record_walk *w)
{
	__u64 off = *left;
	int app = off > 0 && *app_rec; /* continues a record */
	w->begun = 0;
	if (off >= ret) {
		*left = off - ret;
		return app;
	}
	struct user_io io;
	if (syscall_io(&io))
		return 0;
	const __u8 *base = io.iov[0].iov_base;
	__u64 avail = io.iov[0].iov_len < ret ? io.iov[0].iov_len : ret;
	__u32 records = 0, len0 = 0, same = 1;
	for (int i = 0; i < TLS_WALK; i++) {
		__u32 len;
		__u8 type = tls_next(base, &off, avail, ret, &len);
		if (!type)
			break;
		if (type == TLS_CT_APPDATA && !st->cli_23)
			st->tls13 = 1; /* encrypted before the client: TLS 1.3's handshake */
		int data = type == TLS_CT_APPDATA && len != TLS13_ALERT_LEN;
		if (records == 0) {
			len0 = len;
			if (off == 0)
				app = data;
		}
		same &= data && len == len0;
		*app_rec = data;
		records++;
		off += 5 + len;
	}
	*left = off > ret ? off - ret : 0;
	w->begun = records;
	w->len0 = len0;
	w->same = records && same;
	if (app && st->tls13 && st->state == TW_ST_REQUEST && records >= 2 && same && len0 < TLS_TICKET_MAX_LEN)
		return 0; /* session tickets */
	return app;
}

/* tls_recv_opaque accounts a read of ret bytes by the server on a TLS
 * connection no uprobe reads: a request when it carries application data,
 * timed when its bytes reached the socket. */
static __always_inline void tls_recv_opaque(const struct sock *sk, struct stream_state *st, __u64 ret)
{
	if (request_records(st, ret, &st->rx_left))
		tls_request(sk, st, bpf_ktime_get_ns());
}

/* tls_send_opaque accounts a write of ret bytes by the server on a TLS
 * connection no uprobe reads: a chunk when it is a response's. */
static __always_inline int tls_send_opaque(const struct sock *sk, struct stream_state *st, __u64 ret)
{
	struct record_walk w;
	if (response_records(st, ret, &st->tx_left, &st->tx_app, &w) && st->state != TW_ST_IDLE)
		account_write(sk, st, 0, ret, bpf_ktime_get_ns());
	return 0;
}

#endif
