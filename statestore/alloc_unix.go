//go:build unix

package statestore

import (
	"os"
	"syscall"
)

// allocated returns the bytes the file system allocated to a file: more
// than its length for a preallocated file such as a WAL file.
func allocated(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks > 0 {
		return uint64(st.Blocks) * 512
	}
	return uint64(max(fi.Size(), 0))
}
