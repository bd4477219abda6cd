package statestore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A corrupt store. Open finds corruption when Pebble cannot open the
// database, or when a directory carries the mark a Store leaves when Pebble
// reports corruption while it runs (health.corrupt). With the Rebuild
// policy, Open then renames the directory to <dir>.corrupt-<UTC time>,
// keeping it for a post-mortem, and opens an empty store in its place: the
// member restores its tasks from snapshots and the changelog, as it would
// on a new disk. With the Fail policy, Open returns an error wrapping
// ErrCorrupt and leaves the directory as it is.

// CorruptPolicy says what Open does with a corrupt store.
type CorruptPolicy string

// Corrupt policies.
const (
	// Rebuild moves a corrupt store aside and starts an empty one.
	Rebuild CorruptPolicy = "rebuild"
	// Fail refuses to open a corrupt store.
	Fail CorruptPolicy = "fail"
)

// corruptMark is the file a Store that found corruption leaves in its
// directory, holding the reason.
const corruptMark = "HANDOFF-CORRUPT"

// RebuildInfo says that Open found the store corrupt and started an empty
// one.
type RebuildInfo struct {
	// Reason is what was found.
	Reason string
	// MovedTo is where the corrupt directory went.
	MovedTo string
}

// Rebuilt returns what Open found when it replaced a corrupt store with an
// empty one; ok is false when it did not.
func (s *Store) Rebuilt() (info RebuildInfo, ok bool) {
	if s.rebuilt == nil {
		return RebuildInfo{}, false
	}
	return *s.rebuilt, true
}

// writeCorruptMark leaves the corrupt mark with reason in dir.
func writeCorruptMark(fs vfs.FS, dir, reason string) error {
	f, err := fs.Create(fs.PathJoin(dir, corruptMark), vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("mark %s corrupt: %w", dir, err)
	}
	_, err = io.WriteString(f, time.Now().UTC().Format(time.RFC3339)+" "+reason+"\n")
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("mark %s corrupt: %w", dir, err)
	}
	return nil
}

// corruptMarkReason returns the reason in dir's corrupt mark; ok is false
// when dir has none.
func corruptMarkReason(fs vfs.FS, dir string) (reason string, ok bool, err error) {
	f, err := fs.Open(fs.PathJoin(dir, corruptMark))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the corrupt mark of %s: %w", dir, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", false, fmt.Errorf("read the corrupt mark of %s: %w", dir, err)
	}
	return strings.TrimSpace(string(b)), true, nil
}

// isCorrupt tells whether err, from opening or first reading a store,
// means that its files are corrupt.
func isCorrupt(err error) bool {
	return errors.Is(err, ErrCorrupt) || pebble.IsCorruptionError(err)
}

// moveAside renames the corrupt store in dir out of the way.
func moveAside(fs vfs.FS, dir string) (string, error) {
	to := dir + ".corrupt-" + time.Now().UTC().Format("20060102T150405.000Z")
	if err := fs.Rename(dir, to); err != nil {
		return "", fmt.Errorf("move the corrupt store in %s aside: %w", dir, err)
	}
	return to, nil
}

// corruptErr marks a Pebble corruption error as ErrCorrupt, keeping the
// first line of its message (Pebble's corruption errors carry a second
// line and stack traces).
func corruptErr(err error) error {
	if pebble.IsCorruptionError(err) && !errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("%w: %s", ErrCorrupt, firstLine(err.Error()))
	}
	return err
}

// corruptionReason says in one line what Pebble found corrupt.
func corruptionReason(info pebble.DataCorruptionInfo) string {
	return fmt.Sprintf("on-disk corruption: %s; bounds: %s; details: %s", info.Path, info.Bounds, firstLine(fmt.Sprint(info.Details)))
}

// firstLine returns s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
