package xdp

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"go.uber.org/zap"
)

// The watcher polls the file's metadata rather than using inotify:
// fsnotify is not a dependency of this module, a poll at a one-second
// interval costs one stat(2), and polling also sees the file being
// replaced by rename (how editors and config management write files) or
// appearing after being deleted, which inotify watches on one inode miss.
//
// When is a file complete? Writers differ: config management and careful
// tools write a temporary file and rename it over the old one (complete
// the moment it appears); editors rewrite in place within milliseconds;
// `cat > file` or a download piped into it truncates the file and then
// writes for as long as its input lasts. Nothing in the file system says
// "done", so the watcher applies a version only after seeing it unchanged
// (stamp and SHA-256 of the content) at two polls one interval apart: a
// writer that keeps writing keeps the file pending, and a version that
// mixes two writes (the stamp moved during the read) is never taken. A
// writer that pauses for longer than an interval in the middle of the
// file defeats any such rule; EndMarker covers it: such a file is complete
// only when its last line is the marker. A missing file settles the same
// way, so a delete-and-recreate is not counted as a failure.

// startWatch polls the blocklist file until Close.
func (f *Filter) startWatch() {
	ctx, cancel := context.WithCancel(context.Background())
	f.watchStop = cancel
	f.watchDone = make(chan struct{})
	go func() {
		defer close(f.watchDone)
		tick := time.NewTicker(f.cfg.WatchInterval)
		defer tick.Stop()
		var pending *fileVersion
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var stop bool
			if pending, stop = f.poll(pending); stop {
				return
			}
		}
	}()
}

// poll looks at the file once. pending is the version seen at the previous
// poll that differed from the one last decided on (nil: none); poll
// returns the new one, and stop when the filter is closed.
func (f *Filter) poll(pending *fileVersion) (next *fileVersion, stop bool) {
	path := f.cfg.BlocklistFile
	f.mu.Lock()
	decided := f.file
	f.mu.Unlock()
	if statFile(path) == decided.stamp {
		return nil, false
	}
	content, v, err := readVersion(path, f.cfg.MaxFileBytes)
	if errors.Is(err, errChanging) {
		return nil, false
	}
	if err == nil && decided.read && v.sum == decided.sum {
		// Same content under a new stamp (touched, or rewritten with the
		// same bytes): the decision stands.
		f.mu.Lock()
		f.file = v
		f.mu.Unlock()
		return nil, false
	}
	if pending == nil || *pending != v {
		f.log.Debug("blocklist file changed; waiting one interval for it to settle", zap.String("file", path))
		return &v, false
	}
	err = f.decide(v, content, err)
	if errors.Is(err, ErrClosed) {
		return nil, true
	}
	if err != nil {
		f.log.Warn("blocklist file not reloaded; the previous blocklist stays in force",
			zap.String("file", path), zap.String("reason", string(FailureOf(err))), zap.Error(err))
	} else {
		st := f.Stats()
		f.log.Info("blocklist file reloaded", zap.String("file", path),
			zap.Int("ipv4_prefixes", st.Entries4), zap.Int("ipv6_prefixes", st.Entries6))
	}
	if f.cfg.OnReload != nil {
		f.cfg.OnReload(err)
	}
	return nil, false
}

// decide applies (or refuses, counting the failure) a version of the file
// whose content, or read error, is given, and remembers it as decided so
// that the same version is not counted twice.
func (f *Filter) decide(v fileVersion, content []byte, readErr error) error {
	f.reloadMu.Lock()
	defer f.reloadMu.Unlock()
	err := readErr
	if err == nil {
		var prefixes []netip.Prefix
		if prefixes, err = f.decodeFile(content); err == nil {
			err = f.reloadLocked(prefixes)
		}
	}
	if errors.Is(err, ErrClosed) {
		return err
	}
	f.countReload(err)
	f.mu.Lock()
	f.file = v
	f.mu.Unlock()
	return err
}

// ReloadFile re-reads Config.BlocklistFile now and replaces the blocklist
// with Config.Blocklist plus the file's entries, as Reload does, without
// waiting for the file to settle: the caller says it is complete (call it
// on SIGHUP, for example). A file that changes while it is read, lacks
// the end marker, has a bad line, a refused prefix or too many entries
// is refused as a whole, the previous blocklist stays in force, and the
// failure is counted in Stats and returned (a *ReloadError).
func (f *Filter) ReloadFile() error {
	if f.cfg.BlocklistFile == "" {
		return errors.New("xdp: no blocklist file configured")
	}
	content, v, err := readVersion(f.cfg.BlocklistFile, f.cfg.MaxFileBytes)
	if errors.Is(err, errChanging) {
		err = reloadErr(FailureIncomplete, err)
	}
	return f.decide(v, content, err)
}

// loadFile is the file's first read, for Open: it counts nothing, and a
// file that changes while it is read is read again (a few times, an
// interval apart) rather than applied half-written.
func (f *Filter) loadFile() error {
	const attempts = 5
	wait := min(f.cfg.WatchInterval, time.Second)
	if wait <= 0 {
		wait = DefaultWatchInterval
	}
	for i := 0; ; i++ {
		content, v, err := readVersion(f.cfg.BlocklistFile, f.cfg.MaxFileBytes)
		if errors.Is(err, errChanging) && i+1 < attempts {
			time.Sleep(wait)
			continue
		}
		if errors.Is(err, errChanging) {
			return reloadErr(FailureIncomplete, err)
		}
		if err != nil {
			return err
		}
		prefixes, err := f.decodeFile(content)
		if err != nil {
			return err
		}
		f.reloadMu.Lock()
		defer f.reloadMu.Unlock()
		if err := f.reloadLocked(prefixes); err != nil {
			return err
		}
		f.mu.Lock()
		f.file = v
		f.mu.Unlock()
		return nil
	}
}
