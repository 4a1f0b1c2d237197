package tlsprobe

import (
	"errors"
	"io/fs"
	"path/filepath"
)

// Reason says why a TLS library (or executable) is not probed.
type Reason string

// Reasons a target is not probed. ReasonExcluded is a choice of the
// configuration, not a failure; the others are failures.
const (
	// ReasonNoLibrary: the process read TLS on a watched port, but none
	// of its files holds a TLS library the probes know (rustls, Java, a
	// stripped static build).
	ReasonNoLibrary Reason = "no_library"
	// ReasonUnsupported: a TLS library was found but cannot be probed
	// (part of the API missing, not x86-64, Go before 1.17, no symbols).
	ReasonUnsupported Reason = "unsupported"
	// ReasonAccess: the process's files could not be read (permissions:
	// reading another process's /proc entries needs CAP_SYS_PTRACE).
	ReasonAccess Reason = "access"
	// ReasonLoad: the uprobe programs did not load.
	ReasonLoad Reason = "load"
	// ReasonAttach: the kernel refused the uprobes.
	ReasonAttach Reason = "attach"
	// ReasonExcluded: the configuration leaves this process or kind of
	// library unprobed.
	ReasonExcluded Reason = "excluded"
)

// FailureReasons are the reasons counted as probe failures.
var FailureReasons = []Reason{ReasonNoLibrary, ReasonUnsupported, ReasonAccess, ReasonLoad, ReasonAttach}

// Kind is a kind of file the probes attach to.
type Kind string

// Kinds of file to probe.
const (
	KindLibSSL        Kind = "libssl"         // a shared libssl.so (OpenSSL 1.1 or 3): Python, Ruby, nginx, curl
	KindOpenSSLStatic Kind = "openssl_static" // OpenSSL or BoringSSL linked into the executable: Node, Envoy
	KindGo            Kind = "go"             // Go's crypto/tls in a Go executable
)

// Kinds are every kind of file the probes know.
var Kinds = []Kind{KindLibSSL, KindOpenSSLStatic, KindGo}

// errExcluded: the configuration leaves it unprobed.
var errExcluded = errors.New("not probed: excluded by configuration")

// inspectReason classifies an error from inspecting a file.
func inspectReason(err error) Reason {
	var pe *fs.PathError
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) || errors.As(err, &pe) {
		return ReasonAccess
	}
	return ReasonUnsupported
}

// Failure is a key of Manager.Failures.
type Failure struct {
	Reason  Reason
	Library Library
}

func exeName(pid uint32) string { return filepath.Base(exePath(pid)) }
