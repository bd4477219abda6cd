package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/agent/assign"
)

// kvHistory keeps a few revisions of every key so that a member can read the
// assignment a generation names even if a newer one was written meanwhile.
const kvHistory = 8

// OpenBucket creates or updates the group's KV bucket idempotently and
// returns it. A bucket that already has its settings is only looked up:
// every member opens the bucket when it starts, and an update of a stream
// is heavy for the server, and resets what tuneStream sets until it sets it
// again (100 members joining a group of 1,000 made 200 such updates, and
// the leader's batches were refused in between).
func OpenBucket(ctx context.Context, js jetstream.JetStream, group string, replicas int) (jetstream.KeyValue, error) {
	if replicas < 1 {
		replicas = 1
	}
	if kv, ok := bucketAsSet(ctx, js, group, replicas); ok {
		return kv, nil
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      BucketName(group),
		Description: "handoff group " + group + ": config, lease, generations, members",
		History:     kvHistory,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		// Measured on nats-server 2.15: in a bucket with history, a key
		// expires only after max(its TTL, LimitMarkerTTL), so the marker
		// TTL stays at the 1s minimum. Watchers see the marker when it is
		// written.
		LimitMarkerTTL: time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("create or update KV bucket %s: %w", BucketName(group), err)
	}
	if err := tuneStream(ctx, js, group); err != nil {
		return nil, err
	}
	return kv, nil
}

// bucketAsSet returns group's bucket if it exists with the settings
// OpenBucket gives it (replicas as asked), and false otherwise, or when
// it cannot tell.
func bucketAsSet(ctx context.Context, js jetstream.JetStream, group string, replicas int) (jetstream.KeyValue, bool) {
	st, err := js.Stream(ctx, "KV_"+BucketName(group))
	if err != nil {
		return nil, false
	}
	cfg := st.CachedInfo().Config
	if cfg.MaxMsgsPerSubject != kvHistory || cfg.Storage != jetstream.FileStorage || cfg.Replicas != replicas ||
		!cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL != time.Second ||
		cfg.MaxConsumers != maxConsumers || !cfg.AllowAtomicPublish {
		return nil, false
	}
	kv, err := js.KeyValue(ctx, BucketName(group))
	if err != nil {
		return nil, false
	}
	return kv, true
}

// maxConsumers bounds the consumers of the bucket's stream: every member
// holds one or two watches on it, and the leader one more. It is set
// explicitly because nats-server (2.12 and later) gives a stream that sets
// no bound a default of 1,000 consumers, which a group of 500 members
// would reach; creating or updating the bucket (above, as every member's
// Open does) sets none, so the bound is set again after it, and so is
// AllowAtomicPublish (the leader writes a generation's assignments in
// atomic batches: Lease.PutBatch).
const maxConsumers = 1_000_000

// tuneStream sets maxConsumers and AllowAtomicPublish on the bucket's stream
// unless it has them.
func tuneStream(ctx context.Context, js jetstream.JetStream, group string) error {
	name := "KV_" + BucketName(group)
	st, err := js.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("read stream %s: %w", name, err)
	}
	cfg := st.CachedInfo().Config
	if cfg.MaxConsumers == maxConsumers && cfg.AllowAtomicPublish {
		return nil
	}
	cfg.MaxConsumers, cfg.AllowAtomicPublish = maxConsumers, true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("bound the consumers of stream %s and allow atomic batches: %w", name, err)
	}
	return nil
}

// LoadConfig reads the group's stored config; ok is false if the group has
// none yet.
func LoadConfig(ctx context.Context, kv jetstream.KeyValue) (cfg assign.Config, rev uint64, ok bool, err error) {
	e, err := kv.Get(ctx, KeyConfig)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return assign.Config{}, 0, false, nil
	}
	if err != nil {
		return assign.Config{}, 0, false, fmt.Errorf("read group config: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &cfg); err != nil {
		return assign.Config{}, 0, false, fmt.Errorf("decode stored group config (revision %d): %w", e.Revision(), err)
	}
	return cfg, e.Revision(), true, nil
}

// ConfigConflictError says how a member's config differs from its group's.
type ConfigConflictError struct {
	Group string
	Diffs []string // "field: stored -> proposed"
}

func (e *ConfigConflictError) Error() string {
	return fmt.Sprintf("group %q already exists with a different config (stored -> this member's flags):\n  %s\n"+
		"start this member without those settings to adopt the group's config, "+
		"or change the group deliberately with 'handoff group set --group %s ...'",
		e.Group, strings.Join(e.Diffs, "\n  "), e.Group)
}

// EnsureConfig creates the group's config from proposed if the group has
// none, and otherwise checks that the fields this member set explicitly
// (json names; nil means all) agree with the stored config, which it returns.
func EnsureConfig(ctx context.Context, kv jetstream.KeyValue, group string, proposed assign.Config, fields []string) (assign.Config, error) {
	for {
		stored, _, ok, err := LoadConfig(ctx, kv)
		if err != nil {
			return assign.Config{}, err
		}
		if ok {
			var diffs []string
			for _, d := range stored.Diff(proposed) {
				if fields == nil || containsField(fields, d) {
					diffs = append(diffs, d)
				}
			}
			if len(diffs) > 0 {
				return assign.Config{}, &ConfigConflictError{Group: group, Diffs: diffs}
			}
			return stored, nil
		}
		if err := proposed.Validate(); err != nil {
			return assign.Config{}, fmt.Errorf("new group %q: %w", group, err)
		}
		b, err := json.Marshal(proposed)
		if err != nil {
			return assign.Config{}, fmt.Errorf("encode group config: %w", err)
		}
		if _, err := kv.Create(ctx, KeyConfig, b); err == nil {
			return proposed, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return assign.Config{}, fmt.Errorf("create group config: %w", err)
		}
		// Another member created the group meanwhile: compare with its config.
	}
}

func containsField(fields []string, diff string) bool {
	name, _, _ := strings.Cut(diff, ":")
	for _, f := range fields {
		if f == name {
			return true
		}
	}
	return false
}

// UpdateConfig replaces the group's config if it is still at revision rev.
func UpdateConfig(ctx context.Context, kv jetstream.KeyValue, cfg assign.Config, rev uint64) (uint64, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return 0, fmt.Errorf("encode group config: %w", err)
	}
	r, err := kv.Update(ctx, KeyConfig, b, rev)
	if err != nil {
		return 0, fmt.Errorf("update group config at revision %d (someone else may have changed it; retry): %w", rev, err)
	}
	return r, nil
}
