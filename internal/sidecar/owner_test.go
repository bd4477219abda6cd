package sidecar

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDataDirOwner: a data dir keeps its owner token across opens; another
// data dir gets another; an empty token file gets a new one.
func TestDataDirOwner(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	first, err := dataDirOwner(a)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := dataDirOwner(a); err != nil || again != first {
		t.Errorf("dataDirOwner(a) again = %q, %v; want %q", again, err, first)
	}
	if other, err := dataDirOwner(b); err != nil || other == first || other == "" {
		t.Errorf("dataDirOwner(b) = %q, %v; want a token other than a's %q", other, err, first)
	}
	if err := os.WriteFile(filepath.Join(a, OwnerFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if fresh, err := dataDirOwner(a); err != nil || fresh == "" {
		t.Errorf("dataDirOwner of an empty token file = %q, %v; want a new token", fresh, err)
	}
}
