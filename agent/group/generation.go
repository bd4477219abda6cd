package group

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/handoffhq/handoff/agent/assign"
)

// Publisher publishes a leader's generations, fenced on its lease: the
// member assignments that changed, then the generation record that names
// the revision of every one (in full, or compact with the full record
// beside it). It remembers what it last published of each member, so that
// an unchanged assignment is not rewritten. A Publisher is used by one
// leader loop at a time.
type Publisher struct {
	// AfterWrite, if set (by tests), runs after each write of a
	// publication with the key written (after a batch, for each of its
	// keys): a test stops the leader there.
	AfterWrite func(key string)
	// BatchFrom is the fewest changed assignments written in atomic
	// batches (LoadPublisher sets BatchFrom; tests lower it).
	BatchFrom int

	leader     string
	published  map[string]published
	candidates []string
}

type published struct {
	content []byte // the assignment's encoding without when it was written
	rev     uint64
}

// content is ma's encoding without Generation and Term, which do not count
// as a change.
func content(ma MemberAssignment) ([]byte, error) {
	ma.Generation, ma.Term = 0, 0
	return json.Marshal(ma)
}

// LoadPublisher reads the last published generation and the assignments it
// names, and returns a Publisher for leader that continues from them, with
// the assignment they make up (an empty one for a new group).
func LoadPublisher(ctx context.Context, kv jetstream.KeyValue, leader string) (*Publisher, assign.Assignment, error) {
	p := &Publisher{leader: leader, published: map[string]published{}, BatchFrom: BatchFrom}
	g, ok, err := ReadGeneration(ctx, kv)
	if err != nil {
		return nil, assign.Assignment{}, err
	}
	if !ok {
		return p, assign.Assignment{Tasks: map[string]*assign.TaskAssignment{}}, nil
	}
	parts, err := readParts(ctx, kv, g.Assignments)
	if err != nil {
		return nil, assign.Assignment{}, err
	}
	for id, ma := range parts {
		c, err := content(ma)
		if err != nil {
			return nil, assign.Assignment{}, fmt.Errorf("encode assignment of %s: %w", id, err)
		}
		p.published[id] = published{content: c, rev: g.Assignments[id]}
	}
	p.candidates = g.Candidates
	return p, Merge(g, parts), nil
}

// partReaders bounds the reads of members' assignments in flight at once
// (a new leader reads every member's).
const partReaders = 32

// readParts reads each member's assignment at the revision revs names, a
// few at a time.
func readParts(ctx context.Context, kv jetstream.KeyValue, revs map[string]uint64) (map[string]MemberAssignment, error) {
	var (
		mu    sync.Mutex
		parts = make(map[string]MemberAssignment, len(revs))
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(partReaders)
	for id, rev := range revs {
		g.Go(func() error {
			_, ma, err := ReadMemberAssignment(gctx, kv, id, rev)
			if err != nil {
				return err
			}
			mu.Lock()
			parts[id] = ma
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return parts, nil
}

// Covers reports whether the last generation gave exactly the members ids
// an assignment each.
func (p *Publisher) Covers(ids []string) bool {
	if len(p.published) != len(ids) {
		return false
	}
	for _, id := range ids {
		if _, ok := p.published[id]; !ok {
			return false
		}
	}
	return true
}

// PublishStats says how a publication was written.
type PublishStats struct {
	// Writes counts the keys written; Batches the atomic batches that
	// carried the changed assignments (0: written one by one).
	Writes, Batches int
	// Refused is why the server refused an atomic batch, if it did: the
	// assignments were then written one by one.
	Refused error
}

// BatchFrom is the fewest changed assignments a publication writes in
// atomic batches; fewer are written one by one. A single-node file-backed
// stream stages each batch in a store it syncs: in process on a quiet
// server a batch took 2.6 ms for 2 writes, 3.0 ms for 8 and 9.9 ms for
// 500, one by one 0.08, 0.75 and 36 ms. A loaded server (a group of 1,000
// members) or a replicated stream makes each write a slower round trip,
// and batches pay off sooner.
const BatchFrom = 8

// Publish writes res's generation, fenced on l: every live member's
// assignment that changed, in atomic batches when there are p.BatchFrom or
// more (Lease.PutBatch; one by one if the server refuses them), then the
// generation record. Single writes go one after the other: a replicated
// stream refuses a fenced write while another fenced on the same subject
// is in flight, so they cannot be pipelined. Compact, the full record goes
// to KeyIndex and the generation record names it, and a member that left
// the group gets a last assignment that says so. It returns the full
// record of what it published and how it wrote it.
func (p *Publisher) Publish(ctx context.Context, l *Lease, res assign.Result, live []string, compact bool) (GenerationRecord, PublishStats, error) {
	parts, unassigned := Split(res.Assignment, live, res.Shutdown)
	gen, term := res.Assignment.Generation, l.Term()
	revs := make(map[string]uint64, len(parts))
	// change is an entry's member and what it publishes of it (nil: a
	// removal).
	type change struct {
		id      string
		content []byte
	}
	var (
		st      PublishStats
		entries []Entry
		changed []change
	)
	add := func(id string, ma MemberAssignment, c []byte) error {
		data, err := json.Marshal(ma)
		if err != nil {
			return fmt.Errorf("encode assignment of %s: %w", id, err)
		}
		entries = append(entries, Entry{Key: PrefixAssignment + id, Value: data})
		changed = append(changed, change{id, c})
		return nil
	}
	for _, id := range slices.Sorted(maps.Keys(parts)) {
		c, err := content(*parts[id])
		if err != nil {
			return GenerationRecord{}, st, fmt.Errorf("encode assignment of %s: %w", id, err)
		}
		if prev, ok := p.published[id]; ok && bytes.Equal(prev.content, c) {
			revs[id] = prev.rev
			continue
		}
		ma := *parts[id]
		ma.Generation, ma.Term = gen, term
		if err := add(id, ma, c); err != nil {
			return GenerationRecord{}, st, err
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.published)) {
		if _, ok := parts[id]; ok {
			continue
		}
		delete(p.published, id)
		if compact {
			// A member paused past its session still follows its
			// assignment: this tells it it is out.
			if err := add(id, MemberAssignment{Member: id, Generation: gen, Term: term, Removed: true}, nil); err != nil {
				return GenerationRecord{}, st, err
			}
		}
	}
	stored := func(i int, rev uint64) {
		st.Writes++
		if c := changed[i]; c.content != nil {
			p.published[c.id] = published{content: c.content, rev: rev}
			revs[c.id] = rev
		}
		if p.AfterWrite != nil {
			p.AfterWrite(entries[i].Key)
		}
	}
	done := 0
	if len(entries) >= p.BatchFrom {
		brevs, err := l.PutBatch(ctx, entries)
		for i, rev := range brevs {
			stored(i, rev)
		}
		st.Batches = (len(brevs) + MaxBatch - 1) / MaxBatch
		done = len(brevs)
		switch {
		case errors.Is(err, ErrBatchRefused):
			st.Refused = err
		case err != nil:
			return GenerationRecord{}, st, err
		}
	}
	for i := done; i < len(entries); i++ {
		rev, err := l.Put(ctx, entries[i].Key, entries[i].Value)
		if err != nil {
			return GenerationRecord{}, st, err
		}
		stored(i, rev)
	}
	put := func(key string, v any) (uint64, error) {
		data, err := json.Marshal(v)
		if err != nil {
			return 0, fmt.Errorf("encode %s: %w", key, err)
		}
		rev, err := l.Put(ctx, key, data)
		if err != nil {
			return 0, err
		}
		st.Writes++
		if p.AfterWrite != nil {
			p.AfterWrite(key)
		}
		return rev, nil
	}
	g := GenerationRecord{
		Generation:  gen,
		Leader:      p.leader,
		Published:   time.Now(),
		Assignments: revs,
		Unassigned:  unassigned,
		Leaving:     res.Assignment.Leaving,
		Round:       res.Assignment.Round,
		Shutdown:    res.Shutdown,
		Candidates:  p.nextCandidates(live, res.Assignment.Leaving),
		Term:        term,
		Incoming:    Incoming(res.Assignment),
	}
	if compact {
		index, err := put(KeyIndex, g)
		if err != nil {
			return GenerationRecord{}, st, err
		}
		g.Compact, g.Index = true, index
		// What every member reads: nothing of any one member but the
		// direct hand-offs in flight (O(revokes), not O(members)).
		rec := GenerationRecord{Generation: gen, Leader: p.leader, Published: g.Published, Candidates: g.Candidates,
			Term: term, Incoming: g.Incoming, Compact: true, Index: index}
		if _, err := put(KeyGeneration, rec); err != nil {
			return GenerationRecord{}, st, err
		}
		return g, st, nil
	}
	if _, err := put(KeyGeneration, g); err != nil {
		return GenerationRecord{}, st, err
	}
	return g, st, nil
}

// nextCandidates picks the generation's candidates among the live members
// (sorted): the last generation's that are still live and not leaving,
// then the first others, up to Candidates, never the leader.
func (p *Publisher) nextCandidates(live []string, leaving map[string]time.Time) []string {
	ok := func(id string) bool {
		_, gone := leaving[id]
		return id != p.leader && !gone && slices.Contains(live, id)
	}
	var out []string
	for _, id := range p.candidates {
		if ok(id) && len(out) < Candidates {
			out = append(out, id)
		}
	}
	for _, id := range live {
		if len(out) == Candidates {
			break
		}
		if ok(id) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	p.candidates = out
	return out
}

// Split cuts an assignment into one MemberAssignment per member (every
// live member gets one, even an empty one) and the tasks nobody owns.
func Split(as assign.Assignment, live []string, shutdown []string) (map[string]*MemberAssignment, map[string]*assign.TaskAssignment) {
	parts := make(map[string]*MemberAssignment, len(live))
	part := func(id string) *MemberAssignment {
		ma, ok := parts[id]
		if !ok {
			ma = &MemberAssignment{Member: id}
			parts[id] = ma
		}
		return ma
	}
	for _, id := range live {
		part(id)
	}
	unassigned := map[string]*assign.TaskAssignment{}
	for _, id := range slices.Sorted(maps.Keys(as.Tasks)) {
		t := as.Tasks[id]
		if t.Active == "" {
			unassigned[id] = t
		} else {
			ma := part(t.Active)
			if ma.Tasks == nil {
				ma.Tasks = map[string]*assign.TaskAssignment{}
			}
			ma.Tasks[id] = t
		}
		for _, ln := range t.Learners {
			ma := part(ln.Member)
			ma.Learning = append(ma.Learning, id)
		}
		for _, s := range t.Standbys {
			ma := part(s)
			ma.Standby = append(ma.Standby, id)
		}
	}
	for m := range as.Leaving {
		if ma, ok := parts[m]; ok {
			ma.Leaving = true
		}
	}
	for _, m := range shutdown {
		if ma, ok := parts[m]; ok {
			ma.Shutdown = true
		}
	}
	if len(unassigned) == 0 {
		unassigned = nil
	}
	return parts, unassigned
}

// Incoming returns, per member, the tasks of as that a revoke asks to hand
// over to it directly (the revoke names it and the epoch it takes), in
// task order; nil when there are none.
func Incoming(as assign.Assignment) map[string][]string {
	var in map[string][]string
	for _, id := range slices.Sorted(maps.Keys(as.Tasks)) {
		rv := as.Tasks[id].Revoke
		if rv == nil || rv.Target == "" || rv.Epoch == 0 {
			continue
		}
		if in == nil {
			in = map[string][]string{}
		}
		in[rv.Target] = append(in[rv.Target], id)
	}
	return in
}

// Merge is the inverse of Split.
func Merge(g GenerationRecord, parts map[string]MemberAssignment) assign.Assignment {
	as := assign.Assignment{
		Generation: g.Generation,
		Tasks:      map[string]*assign.TaskAssignment{},
		Leaving:    g.Leaving,
		Round:      g.Round,
	}
	for id, t := range g.Unassigned {
		as.Tasks[id] = t
	}
	for _, ma := range parts {
		for id, t := range ma.Tasks {
			as.Tasks[id] = t
		}
	}
	return as
}

// ReadGeneration reads the generation record, in full (the full record
// of a compact one, ReadIndex); ok is false if no generation has been
// published yet.
func ReadGeneration(ctx context.Context, kv jetstream.KeyValue) (g GenerationRecord, ok bool, err error) {
	e, err := kv.Get(ctx, KeyGeneration)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return GenerationRecord{}, false, nil
	}
	if err != nil {
		return GenerationRecord{}, false, fmt.Errorf("read generation record: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &g); err != nil {
		return GenerationRecord{}, false, fmt.Errorf("decode generation record (revision %d): %w", e.Revision(), err)
	}
	if g.Compact {
		g, err = ReadIndex(ctx, kv, g)
	}
	return g, err == nil, err
}

// ReadIndex reads the full record of compact generation record g.
func ReadIndex(ctx context.Context, kv jetstream.KeyValue, g GenerationRecord) (GenerationRecord, error) {
	e, err := kv.GetRevision(ctx, KeyIndex, g.Index)
	if err != nil {
		return GenerationRecord{}, fmt.Errorf("read the full record of generation %d at revision %d: %w", g.Generation, g.Index, err)
	}
	var full GenerationRecord
	if err := json.Unmarshal(e.Value(), &full); err != nil {
		return GenerationRecord{}, fmt.Errorf("decode the full record of generation %d (revision %d): %w", g.Generation, g.Index, err)
	}
	if full.Generation != g.Generation {
		return GenerationRecord{}, fmt.Errorf("the full record at revision %d is of generation %d, not %d", g.Index, full.Generation, g.Generation)
	}
	full.Compact, full.Index = true, g.Index
	return full, nil
}

// ReadMemberAssignment reads member's assignment at revision rev (the one
// a generation record names), and returns its bytes too.
func ReadMemberAssignment(ctx context.Context, kv jetstream.KeyValue, member string, rev uint64) ([]byte, MemberAssignment, error) {
	e, err := kv.GetRevision(ctx, PrefixAssignment+member, rev)
	if err != nil {
		return nil, MemberAssignment{}, fmt.Errorf("read assignment of %s at revision %d: %w", member, rev, err)
	}
	var ma MemberAssignment
	if err := json.Unmarshal(e.Value(), &ma); err != nil {
		return nil, MemberAssignment{}, fmt.Errorf("decode assignment of %s at revision %d: %w", member, rev, err)
	}
	return e.Value(), ma, nil
}

// ReadAssignment reads the last published generation and the assignment
// it makes up, with each member's part.
func ReadAssignment(ctx context.Context, kv jetstream.KeyValue) (GenerationRecord, map[string]MemberAssignment, assign.Assignment, error) {
	g, _, err := ReadGeneration(ctx, kv)
	if err != nil {
		return GenerationRecord{}, nil, assign.Assignment{}, err
	}
	parts, err := readParts(ctx, kv, g.Assignments)
	if err != nil {
		return GenerationRecord{}, nil, assign.Assignment{}, err
	}
	return g, parts, Merge(g, parts), nil
}
