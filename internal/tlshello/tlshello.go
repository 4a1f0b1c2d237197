// Package tlshello reads the server name (SNI) a TLS client asks for from
// the first bytes of its ClientHello, as the kernel copies them from the
// connection's first write. It parses with cryptobyte, bounds-checked at
// every step: the bytes are the client's and may be cut short.
package tlshello

import "golang.org/x/crypto/cryptobyte"

const (
	recordHandshake  = 22
	typeClientHello  = 1
	extServerName    = 0
	nameTypeHostName = 0
	// MaxServerName bounds a name: a DNS name is at most 253 bytes.
	MaxServerName = 255
)

// ServerName returns the host name of the server_name extension of the
// ClientHello at the start of b (a TLS record), or nil when b holds none:
// not a ClientHello, no SNI (a client that connects by address sends
// none), or the extension past the bytes copied. The result aliases b.
func ServerName(b []byte) []byte {
	s := cryptobyte.String(b)
	var typ, msgType uint8
	// The record's and the message's lengths are skipped: the bytes may
	// end before either does.
	if !s.ReadUint8(&typ) || typ != recordHandshake || !s.Skip(2+2) ||
		!s.ReadUint8(&msgType) || msgType != typeClientHello || !s.Skip(3) {
		return nil
	}
	var sessionID, suites, compression cryptobyte.String
	if !s.Skip(2+32) || // client_version, random
		!s.ReadUint8LengthPrefixed(&sessionID) ||
		!s.ReadUint16LengthPrefixed(&suites) ||
		!s.ReadUint8LengthPrefixed(&compression) ||
		!s.Skip(2) { // the extensions' length
		return nil
	}
	for !s.Empty() {
		var extType uint16
		var ext cryptobyte.String
		if !s.ReadUint16(&extType) || !s.ReadUint16LengthPrefixed(&ext) {
			return nil
		}
		if extType == extServerName {
			return hostName(ext)
		}
	}
	return nil
}

// hostName returns the host_name entry of a server_name extension's body.
func hostName(ext cryptobyte.String) []byte {
	var names cryptobyte.String
	if !ext.ReadUint16LengthPrefixed(&names) {
		return nil
	}
	for !names.Empty() {
		var nameType uint8
		var name cryptobyte.String
		if !names.ReadUint8(&nameType) || !names.ReadUint16LengthPrefixed(&name) {
			return nil
		}
		if nameType == nameTypeHostName && validName(name) {
			return name
		}
	}
	return nil
}

// validName says whether name looks like a DNS name: letters, digits,
// '-', '_' and '.', at most MaxServerName bytes. Anything else (a client's
// junk) would become a server.address value.
func validName(name []byte) bool {
	if len(name) == 0 || len(name) > MaxServerName {
		return false
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}
