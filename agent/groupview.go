package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/httpapi"
)

// Group implements httpapi.Backend.
func (a *Agent) Group(ctx context.Context) (httpapi.GroupView, error) {
	var progress []httpapi.LearnerProgress
	for _, p := range a.progress.all() {
		progress = append(progress, p.api())
	}
	gv, err := ReadGroup(ctx, a.kv, a.opts.Group, progress)
	if err != nil {
		return gv, err
	}
	if err := fillSnapshots(ctx, a.snaps.bucket, &gv, time.Now()); err != nil {
		// The group's view is still worth showing without them.
		a.log.Warn().Err(err).Msg("list snapshots for /group")
	}
	return gv, nil
}

// ReadGroup builds the group's view from its KV bucket: the leader, the
// last generation with every member's part, and the live members. progress
// is added as given (learners' reports, heard over NATS by the caller).
func ReadGroup(ctx context.Context, kv jetstream.KeyValue, group string, progress []httpapi.LearnerProgress) (httpapi.GroupView, error) {
	gv := httpapi.GroupView{Group: group, Members: []httpapi.MemberView{}, Tasks: []httpapi.GroupTask{}, Progress: progress}
	sortProgress(gv.Progress)
	cfg, _, ok, err := LoadConfig(ctx, kv)
	if err != nil {
		return gv, err
	}
	if !ok {
		return gv, fmt.Errorf("group %q does not exist (no config in bucket %s)", group, BucketName(group))
	}
	if e, err := kv.Get(ctx, keyLease); err == nil {
		var l leaseRecord
		if json.Unmarshal(e.Value(), &l) == nil {
			gv.Leader = l.Member
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return gv, fmt.Errorf("read leader lease: %w", err)
	}
	records, err := readMembers(ctx, kv)
	if err != nil {
		return gv, err
	}
	g, _, err := readGen(ctx, kv)
	if err != nil {
		return gv, err
	}
	gv.Generation = g.Generation
	entries := map[string]memberEntry{}
	for id, rev := range g.Entries {
		_, e, err := readEntry(ctx, kv, id, rev)
		if err != nil {
			return gv, err
		}
		entries[id] = e
	}
	as := mergeAssignment(g, entries)

	tasks, err := cfg.Tasks()
	if err != nil {
		return gv, fmt.Errorf("group config: %w", err)
	}
	for _, t := range tasks {
		gt := httpapi.GroupTask{ID: t.ID, Stateful: t.Stateful}
		if ta, ok := as.Tasks[t.ID]; ok {
			gt.Active, gt.Epoch, gt.Standbys = ta.Active, ta.Epoch, ta.Standbys
			if ta.Revoke != nil {
				gt.Revoking = ta.Revoke.Target
				if gt.Revoking == "" {
					gt.Revoking = "(retiring)" // the group's last members are leaving
				}
			}
			for _, l := range ta.Learners {
				gt.Learners = append(gt.Learners, l.Member)
			}
		}
		gv.Tasks = append(gv.Tasks, gt)
	}
	ids := map[string]bool{}
	for id := range records {
		ids[id] = true
	}
	for id := range entries {
		ids[id] = true
	}
	shutdown := map[string]bool{}
	for _, id := range g.Shutdown {
		shutdown[id] = true
	}
	for _, id := range sortedKeys(ids) {
		r, live := records[id]
		e, inGen := entries[id]
		mv := httpapi.MemberView{ID: id, Addr: r.Addr, Zone: r.Zone, Capacity: r.Capacity, Active: []string{}}
		switch {
		case !live:
			mv.State = "dead"
		case shutdown[id]:
			mv.State = httpapi.StateDone
		case r.Leaving:
			mv.State = httpapi.StateLeaving
		case !inGen:
			mv.State = httpapi.StateJoining
		default:
			mv.State = httpapi.StateMember
		}
		mv.Active = append(mv.Active, sortedKeys(e.Tasks)...)
		mv.Learning = e.Learning
		mv.Standby = e.Standby
		gv.Members = append(gv.Members, mv)
	}
	return gv, nil
}

// readMembers returns the live member records.
func readMembers(ctx context.Context, kv jetstream.KeyValue) (map[string]memberRecord, error) {
	out := map[string]memberRecord{}
	lister, err := kv.ListKeysFiltered(ctx, prefixMember+">")
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", k, err)
		}
		var r memberRecord
		if json.Unmarshal(e.Value(), &r) == nil {
			out[strings.TrimPrefix(k, prefixMember)] = r
		}
	}
	return out, nil
}
