// Package logtest gives tests a log sink they can search: a buffer that a
// logger's concurrent writes may share.
package logtest

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer collects log lines; it is safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Count returns how many lines contain substr.
func (b *Buffer) Count(substr string) int {
	n := 0
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}
