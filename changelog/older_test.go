package changelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
)

// decodeV1 is how agents that predate release entries check a message
// before they decode its fields: the version check and the kind check of
// their Decode, as they shipped (the fields' decoding is left out). It is
// kept here to prove what such an agent does with a release entry.
func decodeV1(b []byte) (Kind, error) {
	const v1 = 1
	if len(b) == 0 {
		return 0, corrupt("empty entry")
	}
	if b[0] != v1 {
		return 0, fmt.Errorf("version %d, want %d: %w", b[0], v1, ErrUnknownVersion)
	}
	if len(b) < 2+crcLen {
		return 0, corrupt("entry of %d bytes is truncated", len(b))
	}
	body := b[:len(b)-crcLen]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(body):]); got != want {
		return 0, corrupt("checksum %08x, want %08x", got, want)
	}
	k := Kind(body[1])
	if k != KindCommit && k != KindEpoch {
		return 0, corrupt("unknown kind %d", body[1])
	}
	return k, nil
}

// TestOlderReaderStopsOnReleaseEntry: an agent that predates release
// entries stops on one with an error that says it met a later version, and
// still reads the commits and markers around it.
func TestOlderReaderStopsOnReleaseEntry(t *testing.T) {
	_, err := decodeV1(Encode(nil, Entry{Kind: KindRelease, Epoch: 4, Successor: "m2"}))
	if !errors.Is(err, ErrUnknownVersion) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("an older reader's Decode(release entry) = %v, want an unknown version error naming version 2", err)
	}
	for _, e := range []Entry{{Kind: KindCommit, Epoch: 3, Puts: []KV{{Key: []byte("k"), Value: []byte("v")}}}, {Kind: KindEpoch, Epoch: 4}} {
		if k, err := decodeV1(Encode(nil, e)); err != nil || k != e.Kind {
			t.Errorf("an older reader's Decode(%v entry) = %v, %v; want it read as before", e.Kind, k, err)
		}
	}
}
