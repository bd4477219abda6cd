// Package disktest gives tests a small real disk: a tmpfs of a chosen size
// mounted under the test's temp dir (which needs root; elsewhere the test
// is skipped), and files that fill it.
package disktest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size ("16m", "600m") under t's temporary
// directory and unmounts it when the test ends, or skips the test where
// mounting is not allowed.
func Mount(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

// Fill writes a file into dir until its disk is full, and returns its
// path: removing it frees the disk again. A second Fill or FillTo of dir
// appends to the same file.
func Fill(t testing.TB, dir string) string {
	t.Helper()
	return FillTo(t, dir, 0)
}

// FillTo writes a file into dir until its disk has at most leave bytes
// free, and returns its path.
func FillTo(t testing.TB, dir string, leave uint64) string {
	t.Helper()
	path := filepath.Join(dir, "fill")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		free := Free(t, dir)
		if free <= leave {
			return path
		}
		n := min(uint64(len(chunk)), free-leave)
		if _, err := f.Write(chunk[:n]); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			return path
		}
	}
}

// Free returns the bytes free on dir's disk.
func Free(t testing.TB, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}
