package group

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
)

// Publisher publishes a leader's generations, fenced on its lease: the
// member assignments that changed, then the generation record that names
// the revision of every one. It remembers what it last published of each
// member, so that an unchanged assignment is not rewritten. A Publisher is
// used by one leader loop at a time.
type Publisher struct {
	leader    string
	published map[string]published
}

type published struct {
	data []byte
	rev  uint64
}

// LoadPublisher reads the last published generation and the assignments it
// names, and returns a Publisher for leader that continues from them, with
// the assignment they make up (an empty one for a new group).
func LoadPublisher(ctx context.Context, kv jetstream.KeyValue, leader string) (*Publisher, assign.Assignment, error) {
	p := &Publisher{leader: leader, published: map[string]published{}}
	g, ok, err := ReadGeneration(ctx, kv)
	if err != nil {
		return nil, assign.Assignment{}, err
	}
	if !ok {
		return p, assign.Assignment{Tasks: map[string]*assign.TaskAssignment{}}, nil
	}
	parts := make(map[string]MemberAssignment, len(g.Assignments))
	for id, rev := range g.Assignments {
		data, ma, err := ReadMemberAssignment(ctx, kv, id, rev)
		if err != nil {
			return nil, assign.Assignment{}, err
		}
		parts[id] = ma
		p.published[id] = published{data: data, rev: rev}
	}
	return p, Merge(g, parts), nil
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

// Publish writes res's generation: every live member's assignment that
// changed, then the generation record, all fenced on l, one after the
// other: a replicated stream refuses a fenced write while another fenced
// on the same subject is in flight, so they cannot be pipelined. It returns
// the record it published.
func (p *Publisher) Publish(ctx context.Context, l *Lease, res assign.Result, live []string) (GenerationRecord, error) {
	parts, unassigned := Split(res.Assignment, live, res.Shutdown)
	revs := make(map[string]uint64, len(parts))
	for _, id := range slices.Sorted(maps.Keys(parts)) {
		data, err := json.Marshal(parts[id])
		if err != nil {
			return GenerationRecord{}, fmt.Errorf("encode assignment of %s: %w", id, err)
		}
		if prev, ok := p.published[id]; ok && bytes.Equal(prev.data, data) {
			revs[id] = prev.rev
			continue
		}
		rev, err := l.Put(ctx, PrefixAssignment+id, data)
		if err != nil {
			return GenerationRecord{}, err
		}
		p.published[id] = published{data: data, rev: rev}
		revs[id] = rev
	}
	for id := range p.published {
		if _, ok := parts[id]; !ok {
			delete(p.published, id)
		}
	}
	g := GenerationRecord{
		Generation:  res.Assignment.Generation,
		Leader:      p.leader,
		Published:   time.Now(),
		Assignments: revs,
		Unassigned:  unassigned,
		Leaving:     res.Assignment.Leaving,
		Round:       res.Assignment.Round,
		Shutdown:    res.Shutdown,
		Incoming:    Incoming(res.Assignment),
	}
	data, err := json.Marshal(g)
	if err != nil {
		return GenerationRecord{}, fmt.Errorf("encode generation %d: %w", g.Generation, err)
	}
	if _, err := l.Put(ctx, KeyGeneration, data); err != nil {
		return GenerationRecord{}, err
	}
	return g, nil
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

// ReadGeneration reads the generation record; ok is false if no
// generation has been published yet.
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
	return g, true, nil
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
	parts := map[string]MemberAssignment{}
	for id, rev := range g.Assignments {
		_, ma, err := ReadMemberAssignment(ctx, kv, id, rev)
		if err != nil {
			return GenerationRecord{}, nil, assign.Assignment{}, err
		}
		parts[id] = ma
	}
	return g, parts, Merge(g, parts), nil
}
