// Package watchbuf is a test helper: a buffer that a command writes its
// output to while a test watches it, to act the moment a line shows up
// (cancel a run, read an address a log line names) instead of polling.
package watchbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use that calls OnWrite, if
// set, with everything written so far after each write. OnWrite runs on
// the writer's goroutine, outside the buffer's lock.
type Buffer struct {
	OnWrite func(string)

	mu sync.Mutex
	b  bytes.Buffer
}

func (w *Buffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	n, err := w.b.Write(p)
	s := w.b.String()
	w.mu.Unlock()
	if w.OnWrite != nil {
		w.OnWrite(s)
	}
	return n, err
}

// String is everything written so far.
func (w *Buffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
