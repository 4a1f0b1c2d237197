//go:build linux && amd64

package bpf

// HandshakeEvent is the record the handshake programs write to their ring
// buffer (struct handshake_event in tokenwire.h).
type HandshakeEvent = HandshakeHandshakeEvent

// Counter indexes the per-CPU counter arrays (enum tw_counter).
type Counter = HandshakeTwCounter

// Counter indexes, named as in tokenwire.h.
const (
	CounterRingbufLost        = HandshakeTwCounterTW_COUNTER_RINGBUF_LOST
	CounterHandshakeUntracked = HandshakeTwCounterTW_COUNTER_HANDSHAKE_UNTRACKED
)

// Handshake roles and flags (enum tw_role, enum tw_handshake_flag).
const (
	RoleClient = uint8(HandshakeTwRoleTW_ROLE_CLIENT)
	RoleServer = uint8(HandshakeTwRoleTW_ROLE_SERVER)

	HandshakeFailed              = uint8(HandshakeTwHandshakeFlagTW_HS_FAILED)
	HandshakeNoDuration          = uint8(HandshakeTwHandshakeFlagTW_HS_NO_DURATION)
	HandshakeSynackRetransmitted = uint8(HandshakeTwHandshakeFlagTW_HS_SYNACK_RETRANSMITTED)
)
