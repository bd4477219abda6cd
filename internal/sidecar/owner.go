package sidecar

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// OwnerFile is the file in a data dir that holds its owner token (see
// agent.Options.Owner): an agent restarted on the data dir is the same
// member, an agent on another data dir with the same member ID is not.
const OwnerFile = "owner"

// dataDirOwner returns dir's owner token, creating it on first use. Call it
// with the data dir's store open: the store's lock keeps two agents from
// creating it at once.
func dataDirOwner(dir string) (string, error) {
	path := filepath.Join(dir, OwnerFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if token := strings.TrimSpace(string(b)); token != "" {
			return token, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read the data dir's owner token: %w", err)
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("make the data dir's owner token: %w", err)
	}
	token := hex.EncodeToString(raw)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write the data dir's owner token: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write the data dir's owner token: %w", err)
	}
	return token, nil
}
