package sidecar

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// OwnerFile is the file in a data dir that holds its owner token (see
// agent.Options.Owner): an agent restarted on the data dir is the same
// member, an agent on another data dir with the same member ID is not.
const OwnerFile = "owner"

// dataDirOwner returns the owner token of data dir dir on fsys (the local
// store's file system: the disk, or a test's in-memory one), creating it on
// first use. Call it with the data dir's store open: the store's lock keeps
// two agents from creating it at once.
func dataDirOwner(fsys vfs.FS, dir string) (string, error) {
	path := fsys.PathJoin(dir, OwnerFile)
	if token, err := readOwner(fsys, path); err != nil || token != "" {
		return token, err
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("make the data dir's owner token: %w", err)
	}
	token := hex.EncodeToString(raw)
	if err := writeOwner(fsys, path, token); err != nil {
		return "", fmt.Errorf("write the data dir's owner token: %w", err)
	}
	return token, nil
}

// readOwner reads the token at path; "" if there is none.
func readOwner(fsys vfs.FS, path string) (string, error) {
	f, err := fsys.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the data dir's owner token: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("read the data dir's owner token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// writeOwner writes token to path atomically (a temporary file renamed).
func writeOwner(fsys vfs.FS, path, token string) error {
	tmp := path + ".tmp"
	f, err := fsys.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(token + "\n")); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return fsys.Rename(tmp, path)
}
