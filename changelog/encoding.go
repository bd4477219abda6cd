package changelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// One changelog message is one Entry. Commits and epoch markers are
// encoded in version 1:
//
//	offset  field
//	0       version        1 byte: 1
//	1       kind           1 byte: 1 commit, 2 epoch marker
//	2       epoch          uvarint
//	        len(checkpoint) uvarint, then the checkpoint's bytes
//	        len(puts)      uvarint, then for each put:
//	                         uvarint len(key), key, uvarint len(value), value
//	        len(deletes)   uvarint, then for each delete: uvarint len(key), key
//	end-4   crc            CRC-32C (Castagnoli) of every byte before it,
//	                       4 bytes little-endian
//
// Release entries are encoded in version 2, so that a reader that knows
// only version 1 stops on them with ErrUnknownVersion instead of taking
// them for something else:
//
//	0       version        1 byte: 2
//	1       kind           1 byte: 3 release
//	2       epoch          uvarint: the epoch the successor takes
//	        len(successor) uvarint (1 to 128), then the successor's member ID
//	end-4   crc            as above
//
// A reader checks the version first: a message of a later version is
// reported as ErrUnknownVersion, not as corrupt, since its layout (and where
// its checksum lives) may differ. Any other mismatch, a bad checksum, a
// truncated field, an overlong uvarint, an unknown kind, a kind in the
// other version's layout or bytes left over, is ErrCorrupt: the encoding is
// canonical. Empty checkpoint, puts and deletes cost one byte each, so an
// epoch marker is 10 bytes (epochs below 128), a release entry 8 bytes and
// its successor's ID.
const (
	// Version is the encoding version of commits and epoch markers.
	Version = 1
	// VersionRelease is the encoding version of release entries; the
	// highest version Decode reads.
	VersionRelease = 2

	crcLen = 4
	// maxSuccessor bounds a release entry's successor: a member ID.
	maxSuccessor = 128
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors Decode wraps.
var (
	ErrCorrupt        = errors.New("changelog: corrupt entry")
	ErrUnknownVersion = errors.New("changelog: unknown entry version")
)

// Kind says what an entry is.
type Kind uint8

// Kinds of entries.
const (
	// KindCommit is a worker's commit: mutations and a checkpoint.
	KindCommit Kind = 1
	// KindEpoch is an epoch marker: the first message of a new owner, with
	// its epoch and no mutations. Appending it fences the previous owner.
	KindEpoch Kind = 2
	// KindRelease is a release entry: the owner's last message, which hands
	// the task over to Successor at Epoch. Appending it fences the owner;
	// the successor's first commit is fenced on it.
	KindRelease Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindCommit:
		return "commit"
	case KindEpoch:
		return "epoch"
	case KindRelease:
		return "release"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Entry is one changelog message.
type Entry struct {
	Kind Kind
	// Epoch is the writer's epoch; for a release entry, the epoch its
	// successor takes.
	Epoch uint64
	// Successor is the member a release entry hands the task over to; it
	// is empty in the other kinds.
	Successor string
	// Checkpoint is the worker's input position; empty keeps the previous.
	Checkpoint []byte
	Puts       []KV
	Deletes    [][]byte
}

// KV is one put of an entry: a key and its value. It is an alias of a plain
// struct type, the same type as statestore.KV, so that a decoded entry's
// puts apply to the store as they are (restore.Commit) while changelog links
// nothing of the store.
type KV = struct {
	Key   []byte
	Value []byte
}

// EncodedLen returns the length of e's encoding.
func EncodedLen(e Entry) int {
	if e.Kind == KindRelease {
		return 2 + uvarintLen(e.Epoch) + uvarintLen(uint64(len(e.Successor))) + len(e.Successor) + crcLen
	}
	n := 2 + uvarintLen(e.Epoch) + uvarintLen(uint64(len(e.Checkpoint))) + len(e.Checkpoint)
	n += uvarintLen(uint64(len(e.Puts)))
	for _, kv := range e.Puts {
		n += uvarintLen(uint64(len(kv.Key))) + len(kv.Key) + uvarintLen(uint64(len(kv.Value))) + len(kv.Value)
	}
	n += uvarintLen(uint64(len(e.Deletes)))
	for _, k := range e.Deletes {
		n += uvarintLen(uint64(len(k))) + len(k)
	}
	return n + crcLen
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// Encode appends the encoding of e to dst and returns the extended slice. A
// release entry's checkpoint, puts and deletes are not encoded (it has
// none).
func Encode(dst []byte, e Entry) []byte {
	start := len(dst)
	dst = grow(dst, EncodedLen(e))
	if e.Kind == KindRelease {
		dst = append(dst, VersionRelease, byte(e.Kind))
		dst = binary.AppendUvarint(dst, e.Epoch)
		dst = appendBytes(dst, []byte(e.Successor))
		return appendChecksum(dst, start)
	}
	dst = append(dst, Version, byte(e.Kind))
	dst = binary.AppendUvarint(dst, e.Epoch)
	dst = appendBytes(dst, e.Checkpoint)
	dst = binary.AppendUvarint(dst, uint64(len(e.Puts)))
	for _, kv := range e.Puts {
		dst = appendBytes(dst, kv.Key)
		dst = appendBytes(dst, kv.Value)
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Deletes)))
	for _, k := range e.Deletes {
		dst = appendBytes(dst, k)
	}
	return appendChecksum(dst, start)
}

// appendChecksum appends the CRC-32C of dst[start:].
func appendChecksum(dst []byte, start int) []byte {
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), len(b)+n)
	copy(nb, b)
	return nb
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// Decode decodes one entry. The entry's byte slices alias b: keep b
// unchanged while the entry is in use. Errors wrap ErrCorrupt or
// ErrUnknownVersion.
func Decode(b []byte) (Entry, error) {
	var e Entry
	err := decode(&e, b, nil)
	return e, err
}

// Decoder decodes entries into memory it reuses: the puts and deletes of
// every entry decoded since the last Reset share a few large slabs. A
// replayer that decodes many entries before applying them in one batch
// allocates almost nothing per entry. A Decoder is not safe for concurrent use.
type Decoder struct {
	puts []KV
	dels [][]byte
}

// Decode is like the package's Decode, but the entry's Puts and Deletes live
// in d's slabs: valid until the next Reset.
func (d *Decoder) Decode(b []byte) (Entry, error) {
	var e Entry
	err := decode(&e, b, d)
	return e, err
}

// Reset lets d reuse its slabs, invalidating every entry it decoded.
func (d *Decoder) Reset() {
	clear(d.puts) // drop references to message bytes
	clear(d.dels)
	d.puts, d.dels = d.puts[:0], d.dels[:0]
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrCorrupt)
}

func decode(e *Entry, b []byte, d *Decoder) error {
	if len(b) == 0 {
		return corrupt("empty entry")
	}
	if b[0] != Version && b[0] != VersionRelease {
		return fmt.Errorf("version %d, want %d or %d: %w", b[0], Version, VersionRelease, ErrUnknownVersion)
	}
	if len(b) < 2+crcLen {
		return corrupt("entry of %d bytes is truncated", len(b))
	}
	body := b[:len(b)-crcLen]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(body):]); got != want {
		return corrupt("checksum %08x, want %08x", got, want)
	}
	e.Kind = Kind(body[1])
	switch {
	case e.Kind != KindCommit && e.Kind != KindEpoch && e.Kind != KindRelease:
		return corrupt("unknown kind %d", body[1])
	case (e.Kind == KindRelease) != (b[0] == VersionRelease):
		return corrupt("%v entry in the layout of version %d", e.Kind, b[0])
	}
	r := reader{b: body, off: 2}
	e.Epoch = r.uvarint()
	if e.Kind == KindRelease {
		s := r.bytes()
		switch {
		case r.err != nil:
			return r.err
		case len(s) == 0 || len(s) > maxSuccessor:
			return corrupt("release entry names a successor of %d bytes", len(s))
		case r.off != len(body):
			return corrupt("%d bytes after the last field", len(body)-r.off)
		}
		e.Successor = string(s)
		return nil
	}
	if cp := r.bytes(); len(cp) > 0 {
		e.Checkpoint = cp
	}
	// Each put takes at least 2 bytes and each delete 1: a count beyond what
	// the rest could hold is corrupt, and checking it keeps a bad count
	// from allocating.
	if n := r.uvarint(); n > 0 && r.err == nil {
		if n > uint64(len(body)-r.off)/2 {
			return corrupt("%d puts in %d bytes", n, len(body)-r.off)
		}
		var puts []KV
		if d != nil {
			start := len(d.puts)
			d.puts = growKV(d.puts, int(n))
			puts = d.puts[start : start : start+int(n)]
		} else {
			puts = make([]KV, 0, n)
		}
		for range n {
			k := r.bytes()
			v := r.bytes()
			puts = append(puts, KV{Key: k, Value: v})
		}
		if d != nil {
			d.puts = d.puts[:len(d.puts)+int(n)]
		}
		e.Puts = puts
	}
	if n := r.uvarint(); n > 0 && r.err == nil {
		if n > uint64(len(body)-r.off) {
			return corrupt("%d deletes in %d bytes", n, len(body)-r.off)
		}
		var dels [][]byte
		if d != nil {
			start := len(d.dels)
			d.dels = growBytes(d.dels, int(n))
			dels = d.dels[start : start : start+int(n)]
		} else {
			dels = make([][]byte, 0, n)
		}
		for range n {
			dels = append(dels, r.bytes())
		}
		if d != nil {
			d.dels = d.dels[:len(d.dels)+int(n)]
		}
		e.Deletes = dels
	}
	if r.err != nil {
		return r.err
	}
	if r.off != len(body) {
		return corrupt("%d bytes after the last field", len(body)-r.off)
	}
	return nil
}

// growKV makes room for n more elements without changing len(s), keeping
// earlier elements where they are when possible: entries decoded before
// point into the old array, which stays valid if s must move.
func growKV(s []KV, n int) []KV {
	if cap(s)-len(s) >= n {
		return s
	}
	ns := make([]KV, len(s), max(2*cap(s), len(s)+n, 256))
	copy(ns, s)
	return ns
}

func growBytes(s [][]byte, n int) [][]byte {
	if cap(s)-len(s) >= n {
		return s
	}
	ns := make([][]byte, len(s), max(2*cap(s), len(s)+n, 64))
	copy(ns, s)
	return ns
}

// reader reads uvarints and length-prefixed bytes, remembering the first
// error so the decoder checks once.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 || n != uvarintLen(v) { // overlong forms would not re-encode the same
		r.err = corrupt("bad uvarint at offset %d", r.off)
		return 0
	}
	r.off += n
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = corrupt("field of %d bytes at offset %d overruns the entry", n, r.off)
		return nil
	}
	b := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return b
}
