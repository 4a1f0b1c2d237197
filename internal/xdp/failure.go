package xdp

import (
	"errors"
	"fmt"
)

// FailureReason classifies a failed reload, for the reload counters
// (Stats.ReloadErrorsByReason) and the OnReload callback (FailureOf).
type FailureReason string

// Failure reasons, in the order they are checked: a file that fails
// several ways is counted under the first.
const (
	// FailureRead: the blocklist file is missing or unreadable.
	FailureRead FailureReason = "read"
	// FailureTooLarge: the file is larger than Config.MaxFileBytes.
	FailureTooLarge FailureReason = "too_large"
	// FailureIncomplete: the file did not end with Config.EndMarker, or it
	// changed while it was being read.
	FailureIncomplete FailureReason = "incomplete"
	// FailureParse: a line is neither a CIDR nor an address.
	FailureParse FailureReason = "parse"
	// FailurePolicy: a prefix is wider than the minimum prefix length, or
	// blocks every source without Config.PermitBlockAll.
	FailurePolicy FailureReason = "policy"
	// FailureCapacity: more distinct prefixes of a family than its
	// capacity.
	FailureCapacity FailureReason = "capacity"
	// FailureInstall: building or swapping in the kernel tables failed.
	FailureInstall FailureReason = "install"
)

// FailureReasons lists every reason, so that a counter per reason can
// exist (at zero) from the start.
var FailureReasons = []FailureReason{
	FailureRead, FailureTooLarge, FailureIncomplete, FailureParse, FailurePolicy, FailureCapacity, FailureInstall,
}

// ReloadError is the error of a reload that was refused; the blocklist in
// force did not change.
type ReloadError struct {
	Reason FailureReason
	Err    error
}

func (e *ReloadError) Error() string {
	return "xdp: blocklist refused (" + string(e.Reason) + "): " + e.Err.Error()
}

func (e *ReloadError) Unwrap() error { return e.Err }

// FailureOf returns the reason of a reload error, or "" when err is nil or
// not a reload error (ErrClosed, for example).
func FailureOf(err error) FailureReason {
	var re *ReloadError
	if errors.As(err, &re) {
		return re.Reason
	}
	return ""
}

// reloadErr joins errs into a *ReloadError of the given reason.
func reloadErr(reason FailureReason, errs ...error) error {
	err := errors.Join(errs...)
	if err == nil {
		err = fmt.Errorf("%s", reason)
	}
	return &ReloadError{Reason: reason, Err: err}
}
