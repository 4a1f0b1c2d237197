package xdp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// The watcher polls the file's metadata rather than using inotify:
// fsnotify is not a dependency of this module, a poll at a one-second
// interval costs one stat(2), and polling also sees the file being
// replaced by rename (how editors and config management write files) or
// appearing after being deleted, which inotify watches on one inode miss.

// fileStamp identifies one version of a file. Any change of content
// changes the size, the modification time or, for a replacement by
// rename, the inode; ctime catches the rest (a write within the mtime
// granularity that keeps the size).
type fileStamp struct {
	missing      bool
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func statFile(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{missing: true}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{size: fi.Size(), mtime: syscall.NsecToTimespec(fi.ModTime().UnixNano())}
	}
	return fileStamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// startWatch polls the blocklist file until Close; last is the stamp of
// the version already loaded.
func (f *Filter) startWatch(last fileStamp) {
	ctx, cancel := context.WithCancel(context.Background())
	f.watchStop = cancel
	f.watchDone = make(chan struct{})
	path := f.cfg.BlocklistFile
	go func() {
		defer close(f.watchDone)
		tick := time.NewTicker(f.cfg.WatchInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cur := statFile(path)
			if cur == last {
				continue
			}
			// Remember the stamp taken before reading: a write that lands
			// while we read changes it again and triggers another reload.
			last = cur
			err := f.ReloadFile()
			if errors.Is(err, ErrClosed) {
				return
			}
			if err != nil {
				f.log.Warn("blocklist file not reloaded; the previous blocklist stays in force",
					zap.String("file", path), zap.Error(err))
			} else {
				st := f.Stats()
				f.log.Info("blocklist file reloaded", zap.String("file", path),
					zap.Int("ipv4_prefixes", st.Entries4), zap.Int("ipv6_prefixes", st.Entries6))
			}
			if f.cfg.OnReload != nil {
				f.cfg.OnReload(err)
			}
		}
	}()
}

// ReloadFile re-reads Config.BlocklistFile and replaces the blocklist with
// Config.Blocklist plus the file's entries, as Reload does. On error (the
// file is unreadable, a line is bad, the list exceeds the capacity) the
// previous blocklist stays in force, and the error is counted in
// Stats.ReloadErrors and returned. The file watcher calls it on every
// change; call it directly to reload on demand (e.g. on SIGHUP).
func (f *Filter) ReloadFile() error {
	if f.cfg.BlocklistFile == "" {
		return errors.New("xdp: no blocklist file configured")
	}
	prefixes, err := f.readFile()
	if err != nil {
		f.mu.Lock()
		f.reloadErrs++
		f.mu.Unlock()
		return err
	}
	return f.Reload(prefixes)
}

// loadFile is ReloadFile for Open: it counts nothing.
func (f *Filter) loadFile() error {
	prefixes, err := f.readFile()
	if err != nil {
		return err
	}
	f.reloadMu.Lock()
	defer f.reloadMu.Unlock()
	return f.reloadLocked(prefixes)
}

func (f *Filter) readFile() ([]netip.Prefix, error) {
	fromFile, err := ParseFile(f.cfg.BlocklistFile)
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	return append(slices.Clone(f.static), fromFile...), nil
}
