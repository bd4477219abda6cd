package group

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/snapshot"
)

// ReadGroup builds the group's view from its KV bucket: the leader, the
// last generation with every member's part, and the live members. progress
// is added as given (learners' reports, heard over NATS by the caller).
func ReadGroup(ctx context.Context, kv jetstream.KeyValue, group string, progress []api.LearnerProgress) (api.GroupView, error) {
	gv := api.GroupView{Group: group, Members: []api.MemberView{}, Tasks: []api.GroupTask{}, Progress: progress}
	SortProgress(gv.Progress)
	cfg, _, ok, err := LoadConfig(ctx, kv)
	if err != nil {
		return gv, err
	}
	if !ok {
		return gv, fmt.Errorf("group %q does not exist (no config in bucket %s)", group, BucketName(group))
	}
	if gv.Leader, err = ReadLeader(ctx, kv); err != nil {
		return gv, err
	}
	records, err := ReadMembers(ctx, kv)
	if err != nil {
		return gv, err
	}
	g, parts, as, err := ReadAssignment(ctx, kv)
	if err != nil {
		return gv, err
	}
	gv.Generation = g.Generation

	tasks, err := cfg.Tasks()
	if err != nil {
		return gv, fmt.Errorf("group config: %w", err)
	}
	for _, t := range tasks {
		gt := api.GroupTask{ID: t.ID, Stateful: t.Stateful}
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
	for id := range parts {
		ids[id] = true
	}
	shutdown := map[string]bool{}
	for _, id := range g.Shutdown {
		shutdown[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		r, live := records[id]
		ma, inGen := parts[id]
		mv := api.MemberView{ID: id, Addr: r.Addr, Zone: r.Zone, Capacity: r.Capacity, Active: []string{}, Worker: string(r.Worker)}
		if live && r.Worker != assign.WorkerAttached && !r.WorkerSince.IsZero() {
			since := r.WorkerSince
			mv.WorkerSince = &since
		}
		switch {
		case !live:
			mv.State = "dead"
		case shutdown[id]:
			mv.State = api.StateDone
		case r.Leaving:
			mv.State = api.StateLeaving
		case !inGen:
			mv.State = api.StateJoining
		default:
			mv.State = api.StateMember
		}
		mv.Active = append(mv.Active, slices.Sorted(maps.Keys(ma.Tasks))...)
		mv.Learning = ma.Learning
		mv.Standby = ma.Standby
		gv.Members = append(gv.Members, mv)
	}
	return gv, nil
}

// ReadSnapshots fills each task's SnapshotSeq and SnapshotAge in gv from
// the group's snapshot bucket, as of now. A group whose bucket does not
// exist yet has no snapshots.
func ReadSnapshots(ctx context.Context, js jetstream.JetStream, gv *api.GroupView, now time.Time) error {
	b, err := snapshot.OpenExisting(ctx, js, gv.Group)
	if errors.Is(err, snapshot.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return FillSnapshots(ctx, b, gv, now)
}

// FillSnapshots is ReadSnapshots from an open snapshot bucket.
func FillSnapshots(ctx context.Context, b *snapshot.Bucket, gv *api.GroupView, now time.Time) error {
	all, err := b.ListAll(ctx)
	if err != nil {
		return err
	}
	for i := range gv.Tasks {
		if snaps := all[gv.Tasks[i].ID]; len(snaps) > 0 {
			gv.Tasks[i].SnapshotSeq = snaps[0].Seq
			gv.Tasks[i].SnapshotAge = max(now.Sub(snaps[0].Created), 0)
		}
	}
	return nil
}
