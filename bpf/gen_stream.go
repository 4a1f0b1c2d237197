package bpf

//go:generate go tool bpf2go -cc $BPF_CLANG -cflags $BPF_CFLAGS -target amd64 -type stream_payload -type stream_stats -type tw_endpoints -type stream_key -type tw_stream_record -type tw_end_reason -type tw_stream_counter -type tw_response_flag -type tw_body_flag -type tw_stream_state -type tw_stats_flag -type tw_tls_proc_state -type tw_tls_lib -type tw_tls_proc Stream stream.bpf.c -- -I./headers -I.
