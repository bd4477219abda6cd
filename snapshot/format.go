package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"
)

// A snapshot is one stream of bytes:
//
//	magic      8 bytes "hoffsnap"
//	version    1 byte, currently 1
//	task       uvarint length, then the bytes
//	seq        uvarint: the changelog (stream) sequence the state is at
//	epoch      uvarint: the epoch of the commit at seq
//	checkpoint uvarint length, then the bytes
//	keys       uvarint: how many records follow
//	created    uvarint: Unix nanoseconds when the snapshot was pinned
//	header crc 4 bytes little-endian: CRC-32C of every byte before it
//	records    keys times: uvarint len(key), key, uvarint len(value), value;
//	           in strictly increasing key order
//	crc        4 bytes little-endian: CRC-32C of every byte before it
//
// and nothing after. The header has its own checksum so a reader can trust
// it before it streams the records; the final checksum covers everything.
// A reader checks the magic and the version first: a later version is
// ErrUnknownVersion, not ErrCorrupt. The object store adds its own SHA-256
// digest of the whole object, checked when the stream ends.
const (
	// Version is the format version NewEncoder writes.
	Version = 1

	crcLen = 4
	// maxField bounds a key, a value or a checkpoint a Decoder accepts, so
	// a corrupt length cannot make it allocate without bound. A changelog
	// message carries them, so they are far smaller in practice.
	maxField = 64 << 20
	// encodeChunk is how many bytes an Encoder prepares at a time.
	encodeChunk = 64 << 10
)

var (
	magic      = [8]byte{'h', 'o', 'f', 'f', 's', 'n', 'a', 'p'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// Errors a Decoder wraps.
var (
	ErrCorrupt        = errors.New("snapshot: corrupt")
	ErrUnknownVersion = errors.New("snapshot: unknown format version")
)

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrCorrupt)
}

// Header describes a snapshot: whose state it is, at which changelog
// sequence, and how many records follow.
type Header struct {
	Task       string
	Seq        uint64
	Epoch      uint64
	Checkpoint []byte
	Keys       uint64
	Created    time.Time
}

// Source yields a task's keys and values in strictly increasing key order.
// *statestore.Snapshot is one.
type Source interface {
	Next() bool
	Key() []byte
	Value() []byte
	Err() error
}

// Encoder is an io.Reader of a snapshot's encoding, drawn from its Source
// as it is read, so that a state of any size streams through a few
// kilobytes. It fails if the Source yields another number of keys than the
// header says. An Encoder is not safe for concurrent use.
type Encoder struct {
	h   Header
	src Source

	buf   []byte
	off   int
	crc   uint32
	n     uint64 // records encoded
	stage int
	err   error
	size  int64
}

// Encoder stages.
const (
	stageHeader = iota
	stageRecords
	stageTrailer
	stageDone
)

// NewEncoder returns an Encoder of h followed by h.Keys records from src.
func NewEncoder(h Header, src Source) *Encoder {
	return &Encoder{h: h, src: src, buf: make([]byte, 0, encodeChunk+1024)}
}

// Size returns how many bytes the Encoder has produced so far.
func (e *Encoder) Size() int64 { return e.size }

// Read implements io.Reader. It fills p as far as the encoding goes, so
// that the object store's chunks are full.
func (e *Encoder) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if e.off == len(e.buf) {
			if e.err != nil {
				break
			}
			e.buf, e.off = e.buf[:0], 0
			e.err = e.fill()
			continue
		}
		c := copy(p[n:], e.buf[e.off:])
		e.off += c
		n += c
	}
	e.size += int64(n)
	if n > 0 {
		return n, nil
	}
	return 0, e.err
}

// fill prepares the next part of the encoding in e.buf; it returns io.EOF
// when there is nothing more.
func (e *Encoder) fill() error {
	switch e.stage {
	case stageHeader:
		e.buf = appendHeader(e.buf, e.h)
		e.crc = crc32.Update(0, castagnoli, e.buf)
		e.stage = stageRecords
		return nil
	case stageRecords:
		for e.n < e.h.Keys && len(e.buf) < encodeChunk {
			if !e.src.Next() {
				if err := e.src.Err(); err != nil {
					return fmt.Errorf("snapshot of task %q after %d keys: %w", e.h.Task, e.n, err)
				}
				return fmt.Errorf("snapshot of task %q: source ended after %d keys, header says %d", e.h.Task, e.n, e.h.Keys)
			}
			k, v := e.src.Key(), e.src.Value()
			if len(k) > maxField || len(v) > maxField {
				return fmt.Errorf("snapshot of task %q: key %q or its value of %d bytes exceeds %d bytes", e.h.Task, k, len(v), maxField)
			}
			e.buf = binary.AppendUvarint(e.buf, uint64(len(k)))
			e.buf = append(e.buf, k...)
			e.buf = binary.AppendUvarint(e.buf, uint64(len(v)))
			e.buf = append(e.buf, v...)
			e.n++
		}
		e.crc = crc32.Update(e.crc, castagnoli, e.buf)
		if e.n == e.h.Keys {
			if e.src.Next() {
				return fmt.Errorf("snapshot of task %q: source has more than the %d keys the header says", e.h.Task, e.h.Keys)
			}
			if err := e.src.Err(); err != nil {
				return fmt.Errorf("snapshot of task %q: %w", e.h.Task, err)
			}
			e.stage = stageTrailer
		}
		return nil
	case stageTrailer:
		e.buf = binary.LittleEndian.AppendUint32(e.buf, e.crc)
		e.stage = stageDone
		return nil
	}
	return io.EOF
}

func appendHeader(dst []byte, h Header) []byte {
	start := len(dst)
	dst = append(dst, magic[:]...)
	dst = append(dst, Version)
	dst = appendBytes(dst, []byte(h.Task))
	dst = binary.AppendUvarint(dst, h.Seq)
	dst = binary.AppendUvarint(dst, h.Epoch)
	dst = appendBytes(dst, h.Checkpoint)
	dst = binary.AppendUvarint(dst, h.Keys)
	dst = binary.AppendUvarint(dst, uint64(max(h.Created.UnixNano(), 0)))
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// Decoder reads a snapshot from a stream: NewDecoder reads and checks the
// header, then Next, Key and Value walk the records. The final checksum is
// checked when Next reaches the end, so a caller must not treat what it
// read as valid before Next has returned false with a nil Err. A Decoder
// is not safe for concurrent use.
type Decoder struct {
	r     *bufio.Reader
	h     Header
	crc   uint32
	n     uint64
	key   []byte
	value []byte
	err   error
	done  bool
	size  int64
}

// NewDecoder reads a snapshot's header from r. Errors wrap ErrCorrupt or
// ErrUnknownVersion, or are r's.
func NewDecoder(r io.Reader) (*Decoder, error) {
	d := &Decoder{r: bufio.NewReaderSize(r, 256<<10)}
	if err := d.readHeader(); err != nil {
		return nil, err
	}
	return d, nil
}

// Header returns the snapshot's header.
func (d *Decoder) Header() Header { return d.h }

// Size returns how many bytes the Decoder has consumed so far.
func (d *Decoder) Size() int64 { return d.size }

func (d *Decoder) readHeader() error {
	var head [len(magic) + 1]byte
	if err := d.full(head[:]); err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	if [8]byte(head[:8]) != magic {
		return corrupt("not a snapshot (magic %q)", head[:8])
	}
	if head[8] != Version {
		return fmt.Errorf("version %d, want %d: %w", head[8], Version, ErrUnknownVersion)
	}
	task, err := d.bytes(255)
	if err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	d.h.Task = string(task)
	fields := []*uint64{&d.h.Seq, &d.h.Epoch}
	for _, f := range fields {
		if *f, err = d.uvarint(); err != nil {
			return fmt.Errorf("read snapshot header: %w", err)
		}
	}
	cp, err := d.bytes(maxField)
	if err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	if len(cp) > 0 {
		d.h.Checkpoint = cp
	}
	if d.h.Keys, err = d.uvarint(); err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	created, err := d.uvarint()
	if err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	if created > 0 {
		d.h.Created = time.Unix(0, int64(created))
	}
	want := d.crc
	var sum [crcLen]byte
	if err := d.read(sum[:]); err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	if got := binary.LittleEndian.Uint32(sum[:]); got != want {
		return corrupt("header checksum %08x, want %08x", got, want)
	}
	d.crc = crc32.Update(d.crc, castagnoli, sum[:])
	return nil
}

// Next reads the next record and reports whether there is one. When the
// records end it checks the checksum and that nothing follows; Err then
// says whether the snapshot was whole.
func (d *Decoder) Next() bool {
	if d.done || d.err != nil {
		return false
	}
	if d.n == d.h.Keys {
		d.done = true
		d.err = d.finish()
		return false
	}
	k, err := d.bytesInto(d.key[:0])
	if err != nil {
		d.err = fmt.Errorf("record %d of %d: %w", d.n, d.h.Keys, err)
		return false
	}
	v, err := d.bytesInto(d.value[:0])
	if err != nil {
		d.err = fmt.Errorf("record %d of %d: %w", d.n, d.h.Keys, err)
		return false
	}
	d.key, d.value = k, v
	d.n++
	return true
}

// Key returns the current record's key, valid until the next Next.
func (d *Decoder) Key() []byte { return d.key }

// Value returns the current record's value, valid until the next Next.
func (d *Decoder) Value() []byte { return d.value }

// Err returns what ended the records early, or a bad checksum or trailing
// bytes at the end; nil once a whole snapshot has been read.
func (d *Decoder) Err() error { return d.err }

func (d *Decoder) finish() error {
	want := d.crc
	var sum [crcLen]byte
	if err := d.read(sum[:]); err != nil {
		return fmt.Errorf("read snapshot checksum: %w", err)
	}
	if got := binary.LittleEndian.Uint32(sum[:]); got != want {
		return corrupt("checksum %08x, want %08x", got, want)
	}
	// Reading to the end also lets the object store check its digest.
	switch _, err := d.r.ReadByte(); {
	case err == io.EOF:
		return nil
	case err != nil:
		return fmt.Errorf("read the end of the snapshot: %w", err)
	default:
		return corrupt("bytes after the checksum")
	}
}

// read fills p from the stream without adding it to the checksum; a short
// stream is corrupt.
func (d *Decoder) read(p []byte) error {
	n, err := io.ReadFull(d.r, p)
	d.size += int64(n)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corrupt("truncated after %d bytes", d.size)
	}
	return err
}

// full is read, adding p to the checksum.
func (d *Decoder) full(p []byte) error {
	if err := d.read(p); err != nil {
		return err
	}
	d.crc = crc32.Update(d.crc, castagnoli, p)
	return nil
}

func (d *Decoder) uvarint() (uint64, error) {
	var b [binary.MaxVarintLen64]byte
	for i := range b {
		c, err := d.r.ReadByte()
		if err == io.EOF {
			return 0, corrupt("truncated after %d bytes", d.size)
		}
		if err != nil {
			return 0, err
		}
		d.size++
		b[i] = c
		if c < 0x80 {
			if i > 0 && c == 0 {
				return 0, corrupt("overlong uvarint at byte %d", d.size)
			}
			d.crc = crc32.Update(d.crc, castagnoli, b[:i+1])
			x, n := binary.Uvarint(b[:i+1])
			if n <= 0 {
				return 0, corrupt("bad uvarint at byte %d", d.size)
			}
			return x, nil
		}
	}
	return 0, corrupt("uvarint too long at byte %d", d.size)
}

func (d *Decoder) bytes(limit uint64) ([]byte, error) { return d.bytesLimit(nil, limit) }

func (d *Decoder) bytesInto(dst []byte) ([]byte, error) { return d.bytesLimit(dst, maxField) }

func (d *Decoder) bytesLimit(dst []byte, limit uint64) ([]byte, error) {
	n, err := d.uvarint()
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, corrupt("field of %d bytes, at most %d", n, limit)
	}
	if uint64(cap(dst)) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	if err := d.full(dst); err != nil {
		return nil, err
	}
	return dst, nil
}
