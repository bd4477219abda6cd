package sidecar

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestDataDirOwner: a data dir keeps its owner token across opens; another
// data dir gets another; an empty token file gets a new one; a store on an
// in-memory file system keeps its token there.
func TestDataDirOwner(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	first, err := dataDirOwner(vfs.Default, a)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := dataDirOwner(vfs.Default, a); err != nil || again != first {
		t.Errorf("dataDirOwner(a) again = %q, %v; want %q", again, err, first)
	}
	if other, err := dataDirOwner(vfs.Default, b); err != nil || other == first || other == "" {
		t.Errorf("dataDirOwner(b) = %q, %v; want a token other than a's %q", other, err, first)
	}
	if err := os.WriteFile(filepath.Join(a, OwnerFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if fresh, err := dataDirOwner(vfs.Default, a); err != nil || fresh == "" {
		t.Errorf("dataDirOwner of an empty token file = %q, %v; want a new token", fresh, err)
	}

	mem := vfs.NewMem()
	if err := mem.MkdirAll("/m1", 0o755); err != nil {
		t.Fatal(err)
	}
	inMem, err := dataDirOwner(mem, "/m1")
	if err != nil || inMem == "" {
		t.Fatalf("dataDirOwner on an in-memory FS = %q, %v", inMem, err)
	}
	if again, err := dataDirOwner(mem, "/m1"); err != nil || again != inMem {
		t.Errorf("dataDirOwner on an in-memory FS again = %q, %v; want %q", again, err, inMem)
	}
}
