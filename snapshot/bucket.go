// Package snapshot is a task's whole state at a known changelog sequence,
// kept in the group's JetStream object store so that a member restoring the
// task loads the state and replays only the changelog after it, and so that
// the changelog below a stored snapshot can be trimmed. It owns the
// snapshot's binary format (versioned, checksummed, streamed: no state is
// ever held in memory whole), the object-store bucket and the names in it,
// and the retention rule that trims the changelog and prunes older
// snapshots. It is a package of its own because both the writer (the
// agent, on the active owner) and the reader (restore) use it and neither
// is its home; like changelog, it sits below both. Taking a snapshot out of
// the local store is snapshot/local's, so that this package links no Pebble
// and the CLI lists the bucket through it alone.
package snapshot

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/changelog"
)

// Object metadata keys. Every snapshot object names its task, sequence,
// epoch, key count and format version, so a listing describes snapshots
// without reading them.
const (
	metaTask    = "handoff-task"
	metaSeq     = "handoff-seq"
	metaEpoch   = "handoff-epoch"
	metaKeys    = "handoff-keys"
	metaVersion = "handoff-format"
)

// stallReads is how many empty reads in a row (each up to the object
// store's read timeout) make a Reader give up: the object store's reader
// reports a stalled stream, e.g. of an object deleted while it is read, as
// empty reads rather than as an error.
const stallReads = 6

// ErrNotFound is wrapped when a bucket or an object does not exist.
var ErrNotFound = errors.New("snapshot: not found")

// BucketName returns the name of group's snapshot bucket.
func BucketName(group string) string { return "handoff_" + group + "_snapshots" }

// ObjectName returns the name of task's snapshot at seq. Sequences are
// zero-padded so that names sort like sequences.
func ObjectName(task string, seq uint64) string { return fmt.Sprintf("%s/%020d", task, seq) }

// Options configure a group's bucket.
type Options struct {
	Group string
	// Replicas of the bucket's stream; 0 means 1. Use 3 on a cluster.
	Replicas int
	// Storage of the bucket's stream; the zero value is file storage.
	Storage jetstream.StorageType
	// ChunkSize is the size of the object store's messages; 0 means the
	// object store's default (128 KiB).
	ChunkSize uint32
}

// Bucket is a group's snapshot bucket. It is safe for concurrent use.
type Bucket struct {
	obs       jetstream.ObjectStore
	stream    jetstream.Stream
	name      string
	chunkSize uint32
}

// Open makes sure group's snapshot bucket exists (creating it, or updating
// its settings) and returns it.
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Bucket, error) {
	if !changelog.ValidGroup(opts.Group) {
		return nil, fmt.Errorf("open snapshot bucket: group %q must be 1 to 64 letters, digits, '_' or '-'", opts.Group)
	}
	replicas := max(opts.Replicas, 1)
	name := BucketName(opts.Group)
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      name,
		Description: "handoff snapshots of group " + opts.Group + ": each task's state at a changelog sequence",
		Storage:     opts.Storage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("create or update object store %s: %w", name, err)
	}
	return newBucket(ctx, js, obs, name, opts.ChunkSize)
}

// OpenExisting returns group's snapshot bucket without creating it; the
// error wraps ErrNotFound when the group has none (no member has opened it).
func OpenExisting(ctx context.Context, js jetstream.JetStream, group string) (*Bucket, error) {
	name := BucketName(group)
	obs, err := js.ObjectStore(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("object store %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", name, err)
	}
	return newBucket(ctx, js, obs, name, 0)
}

func newBucket(ctx context.Context, js jetstream.JetStream, obs jetstream.ObjectStore, name string, chunk uint32) (*Bucket, error) {
	stream, err := js.Stream(ctx, "OBJ_"+name)
	if err != nil {
		return nil, fmt.Errorf("stream of object store %s: %w", name, err)
	}
	return &Bucket{obs: obs, stream: stream, name: name, chunkSize: chunk}, nil
}

// Name returns the bucket's name.
func (b *Bucket) Name() string { return b.name }

// Info describes one stored snapshot.
type Info struct {
	Task  string
	Seq   uint64
	Epoch uint64
	Keys  uint64
	// Size is the object's size in bytes.
	Size uint64
	// Created is when the object store stored the snapshot (server time).
	Created time.Time
	// Name is the object's name.
	Name string

	nuid   string
	chunks uint32
	digest string
}

func (i Info) String() string {
	return fmt.Sprintf("snapshot of task %s at seq %d (%d keys, %d bytes)", i.Task, i.Seq, i.Keys, i.Size)
}

// infoOf reads a snapshot's description from an object's; ok is false for
// objects that are not snapshots.
func infoOf(o *jetstream.ObjectInfo) (Info, bool) {
	if o == nil || o.Deleted || o.Metadata == nil || o.Metadata[metaVersion] == "" {
		return Info{}, false
	}
	num := func(k string) (uint64, bool) {
		n, err := strconv.ParseUint(o.Metadata[k], 10, 64)
		return n, err == nil
	}
	seq, ok1 := num(metaSeq)
	epoch, ok2 := num(metaEpoch)
	keys, ok3 := num(metaKeys)
	task := o.Metadata[metaTask]
	if !ok1 || !ok2 || !ok3 || task == "" || o.Name != ObjectName(task, seq) {
		return Info{}, false
	}
	return Info{
		Task: task, Seq: seq, Epoch: epoch, Keys: keys, Size: o.Size, Created: o.ModTime, Name: o.Name,
		nuid: o.NUID, chunks: o.Chunks, digest: o.Digest,
	}, true
}

// listTimeout bounds one listing of the bucket, whatever the caller's
// context: the object store lists through a watcher that waits for the
// bucket's end with no deadline of its own, and a watcher whose server
// restarted meanwhile never sees it. A variable for the tests.
var listTimeout = 10 * time.Second

// list lists the bucket's objects, within listTimeout.
func (b *Bucket) list(ctx context.Context, opts ...jetstream.ListObjectsOpt) ([]*jetstream.ObjectInfo, error) {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	objs, err := b.obs.List(lctx, opts...)
	if err != nil && lctx.Err() != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("no end of the listing within %s: %w", listTimeout, err)
	}
	return objs, err
}

// ListAll returns every task's snapshots, newest (highest sequence) first.
func (b *Bucket) ListAll(ctx context.Context) (map[string][]Info, error) {
	objs, err := b.list(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return map[string][]Info{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list snapshots in %s: %w", b.name, err)
	}
	out := map[string][]Info{}
	for _, o := range objs {
		if i, ok := infoOf(o); ok {
			out[i.Task] = append(out[i.Task], i)
		}
	}
	for _, is := range out {
		sort.Slice(is, func(a, c int) bool { return is[a].Seq > is[c].Seq })
	}
	return out, nil
}

// List returns task's snapshots, newest first. It lists the whole bucket:
// the object store has no listing by prefix.
func (b *Bucket) List(ctx context.Context, task string) ([]Info, error) {
	all, err := b.ListAll(ctx)
	if err != nil {
		return nil, err
	}
	return all[task], nil
}

// PutSource streams the snapshot described by h, whose records come from
// src (exactly h.Keys of them, in increasing key order), to the bucket, and
// returns it once the object store has acknowledged every part and the
// object reads back whole: its metadata names what was written and all its
// chunks are stored. Nothing is visible under the snapshot's name before
// that; a PutSource that fails or is killed leaves at most unreferenced
// chunks (see Sweep). It reads src to its end; the caller closes it. ctx
// bounds the whole upload. snapshot/local puts a task's local state.
func (b *Bucket) PutSource(ctx context.Context, h Header, src Source) (Info, error) {
	if !changelog.ValidTask(h.Task) || h.Seq == 0 {
		return Info{}, fmt.Errorf("snapshot of task %q at seq %d: want a valid task and a positive sequence", h.Task, h.Seq)
	}
	name := ObjectName(h.Task, h.Seq)
	meta := jetstream.ObjectMeta{
		Name:        name,
		Description: fmt.Sprintf("state of task %s at changelog seq %d", h.Task, h.Seq),
		Metadata: map[string]string{
			metaTask:    h.Task,
			metaSeq:     strconv.FormatUint(h.Seq, 10),
			metaEpoch:   strconv.FormatUint(h.Epoch, 10),
			metaKeys:    strconv.FormatUint(h.Keys, 10),
			metaVersion: strconv.Itoa(Version),
		},
	}
	if b.chunkSize > 0 {
		meta.Opts = &jetstream.ObjectMetaOptions{ChunkSize: b.chunkSize}
	}
	put, err := b.obs.Put(ctx, meta, NewEncoder(h, src))
	if err != nil {
		return Info{}, fmt.Errorf("upload %s to %s: %w", name, b.name, err)
	}
	return b.verify(ctx, put)
}

// verify checks that a put object reads back as put.
func (b *Bucket) verify(ctx context.Context, put *jetstream.ObjectInfo) (Info, error) {
	got, err := b.obs.GetInfo(ctx, put.Name)
	if err != nil {
		return Info{}, fmt.Errorf("read back %s: %w", put.Name, err)
	}
	info, ok := infoOf(got)
	if !ok || got.NUID != put.NUID || got.Size != put.Size || got.Digest != put.Digest || got.Chunks != put.Chunks {
		return Info{}, fmt.Errorf("read back %s: metadata %+v differs from what was put (another upload of the same name?)", put.Name, got)
	}
	subj := b.chunkSubject(got.NUID)
	si, err := b.stream.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return Info{}, fmt.Errorf("read back %s: %w", put.Name, err)
	}
	if n := si.State.Subjects[subj]; n != uint64(got.Chunks) {
		return Info{}, fmt.Errorf("read back %s: %d of its %d chunks are stored", put.Name, n, got.Chunks)
	}
	return info, nil
}

func (b *Bucket) chunkSubject(nuid string) string { return "$O." + b.name + ".C." + nuid }

func (b *Bucket) metaSubject(name string) string {
	return "$O." + b.name + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// Reader reads one stored snapshot: its Decoder walks the records as they
// arrive. Close it.
type Reader struct {
	*Decoder
	res jetstream.ObjectResult
}

// Read opens the stored snapshot info and reads its header, which must
// agree with info. The error wraps ErrNotFound when the object is gone,
// ErrCorrupt or ErrUnknownVersion when it is not a snapshot this code reads.
func (b *Bucket) Read(ctx context.Context, info Info) (*Reader, error) {
	// An object whose chunks are gone would stall its reader rather than
	// fail it: check they are all there first.
	if info.nuid != "" {
		subj := b.chunkSubject(info.nuid)
		si, err := b.stream.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", info, err)
		}
		if n := si.State.Subjects[subj]; n != uint64(info.chunks) {
			return nil, fmt.Errorf("read %s: %d of its %d chunks are stored: %w", info, n, info.chunks, ErrNotFound)
		}
	}
	res, err := b.obs.Get(ctx, info.Name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("read %s: %w", info, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", info, err)
	}
	d, err := NewDecoder(&stallGuard{r: res})
	if err != nil {
		_ = res.Close()
		return nil, fmt.Errorf("read %s: %w", info, err)
	}
	if h := d.Header(); h.Task != info.Task || h.Seq != info.Seq || h.Epoch != info.Epoch || h.Keys != info.Keys {
		_ = res.Close()
		return nil, fmt.Errorf("read %s: header says task %s seq %d epoch %d keys %d: %w", info, h.Task, h.Seq, h.Epoch, h.Keys, ErrCorrupt)
	}
	return &Reader{Decoder: d, res: res}, nil
}

// Close stops reading.
func (r *Reader) Close() error { return r.res.Close() }

// stallGuard turns a run of empty reads into an error.
type stallGuard struct {
	r     io.Reader
	empty int
}

var errStalled = errors.New("snapshot: object stream stalled (deleted while read?)")

func (g *stallGuard) Read(p []byte) (int, error) {
	for {
		n, err := g.r.Read(p)
		if n > 0 || err != nil || len(p) == 0 {
			g.empty = 0
			return n, err
		}
		if g.empty++; g.empty >= stallReads {
			return 0, errStalled
		}
	}
}

// Delete removes a stored snapshot: its metadata first, so that it
// disappears at once, then its chunks. Unlike the object store's own
// Delete it leaves no tombstone behind, so a bucket that sees a snapshot a
// minute for years does not fill with them.
func (b *Bucket) Delete(ctx context.Context, info Info) error {
	if err := b.stream.Purge(ctx, jetstream.WithPurgeSubject(b.metaSubject(info.Name))); err != nil {
		return fmt.Errorf("delete %s: %w", info, err)
	}
	if info.nuid != "" {
		if err := b.stream.Purge(ctx, jetstream.WithPurgeSubject(b.chunkSubject(info.nuid))); err != nil {
			return fmt.Errorf("delete chunks of %s: %w", info, err)
		}
	}
	return nil
}

// Sweep removes chunks that no object refers to and that were last written
// before olderThan ago: what uploads left when their process died
// mid-upload. An upload in progress writes its chunks continuously, so a
// generous olderThan (an hour) never touches one. It returns how many
// uploads' chunks it removed.
func (b *Bucket) Sweep(ctx context.Context, olderThan time.Duration) (int, error) {
	prefix := "$O." + b.name + ".C."
	si, err := b.stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return 0, fmt.Errorf("sweep %s: %w", b.name, err)
	}
	if len(si.State.Subjects) == 0 {
		return 0, nil
	}
	objs, err := b.list(ctx, jetstream.ListObjectsShowDeleted())
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0, fmt.Errorf("sweep %s: %w", b.name, err)
	}
	live := map[string]bool{}
	for _, o := range objs {
		live[o.NUID] = true
	}
	cutoff := time.Now().Add(-olderThan)
	swept := 0
	for subj := range si.State.Subjects {
		nuid := strings.TrimPrefix(subj, prefix)
		if live[nuid] {
			continue
		}
		last, err := b.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return swept, fmt.Errorf("sweep %s: %w", b.name, err)
		}
		if last.Time.After(cutoff) {
			continue
		}
		// Another member may have listed the same orphan: purging twice
		// is harmless.
		if err := b.stream.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return swept, fmt.Errorf("sweep %s: %w", b.name, err)
		}
		swept++
	}
	return swept, nil
}
