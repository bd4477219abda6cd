package proc

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
)

// LineReader reads a growing file of JSON lines incrementally: each Refresh
// hands the complete lines written since the last one to Parse. A line cut
// short by a SIGKILL is skipped once a later line follows it; the count of
// lines Parse refused is kept. Lines that do not start with '{' (markers, a
// panic trace) are skipped. Safe for concurrent use; set Path and Parse
// before the first Refresh.
type LineReader struct {
	Path  string
	Parse func(line []byte) error

	mu      sync.Mutex
	offset  int64
	partial []byte
	bad     int
	lastBad string
}

// Refresh parses what was appended since the last call.
func (r *LineReader) Refresh() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := os.Open(r.Path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", r.Path, err)
	}
	defer f.Close()
	if _, err := f.Seek(r.offset, io.SeekStart); err != nil {
		return fmt.Errorf("seek %s: %w", r.Path, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("read %s: %w", r.Path, err)
	}
	r.offset += int64(len(data))
	data = append(r.partial, data...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := data[:i]
		data = data[i+1:]
		if len(bytes.TrimSpace(line)) == 0 || line[0] != '{' {
			continue // the harness's own markers, a panic trace, ...
		}
		if err := r.Parse(line); err != nil {
			r.bad++
			r.lastBad = fmt.Sprintf("%q: %v", line, err)
		}
	}
	r.partial = append([]byte(nil), data...)
	return nil
}

// Bad returns how many lines could not be parsed, and the last of them.
func (r *LineReader) Bad() (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bad, r.lastBad
}
