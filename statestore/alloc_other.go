//go:build !unix

package statestore

import "os"

// allocated returns a file's length: this platform does not tell what the
// file system allocated.
func allocated(fi os.FileInfo) uint64 { return uint64(max(fi.Size(), 0)) }
