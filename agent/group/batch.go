package group

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/handoffhq/handoff/internal/fence"
)

// Entry is one key and value of a batch (Lease.PutBatch).
type Entry struct {
	Key   string
	Value []byte
}

// MaxBatch is the most entries one atomic batch carries; PutBatch cuts a
// longer list into batches of it. nats-server refuses batches of more than
// 1,000 messages by default (its max_batch_size).
const MaxBatch = 500

// ErrBatchRefused means the server did not take an atomic batch for a
// reason other than the fence: the bucket's stream does not allow atomic
// batches (a server before 2.12, or an agent of an earlier version that
// updated the bucket and reset the setting), or a server limit. Nothing of
// the refused batch was stored; the caller writes its entries one by one.
var ErrBatchRefused = errors.New("atomic batch refused")

// The headers of an atomic batch publish (nats.go has no helper for it).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// batchAck is the server's answer to a batch's commit.
type batchAck struct {
	Sequence uint64              `json:"seq"`
	Batch    string              `json:"batch"`
	Count    uint64              `json:"count"`
	Error    *jetstream.APIError `json:"error"`
}

// PutBatch writes entries only while the lease is the leader's, as Put
// does, but in atomic batches of up to MaxBatch (one round trip each, not
// one per entry): each batch is fenced on the lease by its first message,
// and the server stores all of it or none of it. It returns each entry's
// new revision. ErrLeaseLost means the lease was lost before a batch was
// stored; ErrBatchRefused that the server would not take one (the batches
// before it are stored).
func (l *Lease) PutBatch(ctx context.Context, entries []Entry) ([]uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	revs := make([]uint64, 0, len(entries))
	for len(entries) > 0 {
		if l.lost {
			return revs, ErrLeaseLost
		}
		n := min(len(entries), MaxBatch)
		last, err := publishBatch(ctx, l.js.Conn(), l.group, entries[:n], l.rev, true)
		if err != nil {
			if _, fenced := fence.WrongLastSequence(err); fenced {
				l.lost = true
				return revs, ErrLeaseLost
			}
			return revs, err
		}
		// A batch is stored at consecutive sequences, its commit last.
		for i := range n {
			revs = append(revs, last-uint64(n-1-i))
		}
		entries = entries[n:]
	}
	return revs, nil
}

// publishBatch publishes entries to group's bucket as one atomic batch, its
// first message fenced on the lease at leaseRev, and returns the sequence
// of its last. Without commit it leaves the batch unfinished (a leader that
// stops halfway, for tests); the server then drops it.
func publishBatch(ctx context.Context, nc *nats.Conn, group string, entries []Entry, leaseRev uint64, commit bool) (uint64, error) {
	id, err := batchID()
	if err != nil {
		return 0, err
	}
	for i, e := range entries {
		m := nats.NewMsg(keySubject(group, e.Key))
		m.Data = e.Value
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i == 0 {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(leaseRev, 10))
			m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, keySubject(group, KeyLease))
		}
		if i < len(entries)-1 {
			if err := nc.PublishMsg(m); err != nil {
				return 0, fmt.Errorf("publish %s in a batch: %w", e.Key, err)
			}
			continue
		}
		if !commit {
			return 0, nc.PublishMsg(m)
		}
		m.Header.Set(hdrBatchCommit, "1")
		resp, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return 0, fmt.Errorf("commit a batch of %d writes: %w", len(entries), err)
		}
		var ack batchAck
		if err := json.Unmarshal(resp.Data, &ack); err != nil {
			return 0, fmt.Errorf("decode the answer to a batch of %d writes: %w", len(entries), err)
		}
		switch {
		case ack.Error != nil:
			if _, fenced := fence.WrongLastSequence(ack.Error); fenced {
				return 0, ack.Error
			}
			return 0, fmt.Errorf("%w: %d writes: %w", ErrBatchRefused, len(entries), ack.Error)
		case ack.Batch != id || ack.Count != uint64(len(entries)):
			return 0, fmt.Errorf("a batch of %d writes (%s) answered for batch %q of %d", len(entries), id, ack.Batch, ack.Count)
		}
		return ack.Sequence, nil
	}
	return 0, errors.New("an empty batch")
}

// batchID names a batch: unique among the stream's batches in flight.
func batchID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("name a batch: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
