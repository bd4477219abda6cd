package group

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/handoffhq/handoff/api"
)

// Queries of a task's state between members, and from outside the group,
// over core NATS request-reply. Every member that holds a copy of a task
// subscribes to the task's query subject; a request carries the query and
// its bound, resolved to a sequence or a lag (QueryRequest), and only a
// copy that meets it answers. A requester takes the first answer, and asks
// again, with backoff, while nobody answers, until its deadline.

// QuerySubject is the subject the copies of task answer queries on.
func QuerySubject(group, task string) string { return "handoff." + group + ".query." + task }

// queryVersion is the version of the encoding of requests and answers.
const queryVersion = 1

// QueryRequest is a query as the copies see it. Its bound is resolved: a
// default bound becomes MinSeq = the task's last sequence when the query
// arrived, so that any copy can tell by itself whether it meets it.
type QueryRequest struct {
	Kind     api.QueryKind
	Bound    api.Bound
	Keys     [][]byte
	MaxBytes int
	Scan     api.ScanOptions
}

// Answer statuses.
const (
	answerOK       = 0
	answerTooLarge = 1 // the values pass MaxBytes: Message says so
)

// QueryAnswer is a copy's answer; Err, when set, wraps api.ErrTooLarge.
type QueryAnswer struct {
	api.QueryAnswer
	Err error
}

// EncodeQuery appends the encoding of q to dst.
func EncodeQuery(dst []byte, q QueryRequest) []byte {
	dst = append(dst, queryVersion, byte(q.Kind))
	dst = binary.AppendUvarint(dst, q.Bound.MinSeq)
	lagged := byte(0)
	if q.Bound.Lagged {
		lagged = 1
	}
	dst = append(dst, lagged)
	dst = binary.AppendUvarint(dst, q.Bound.MaxLag)
	switch q.Kind {
	case api.QueryGet, api.QueryGetMany:
		dst = binary.AppendUvarint(dst, uint64(max(q.MaxBytes, 0)))
		dst = binary.AppendUvarint(dst, uint64(len(q.Keys)))
		for _, k := range q.Keys {
			dst = appendBytes(dst, k)
		}
	case api.QueryScan:
		dst = appendBytes(dst, q.Scan.Prefix)
		dst = appendBytes(dst, q.Scan.Start)
		dst = binary.AppendUvarint(dst, uint64(max(q.Scan.Limit, 0)))
	}
	return dst
}

// DecodeQuery decodes a request; the slices it returns alias b.
func DecodeQuery(b []byte) (QueryRequest, error) {
	d := decoder{b: b}
	var q QueryRequest
	if v := d.byte(); v != queryVersion {
		return q, fmt.Errorf("query: version %d, want %d", v, queryVersion)
	}
	q.Kind = api.QueryKind(d.byte())
	q.Bound.MinSeq = d.uvarint()
	q.Bound.Lagged = d.byte() == 1
	q.Bound.MaxLag = d.uvarint()
	switch q.Kind {
	case api.QueryGet, api.QueryGetMany:
		q.MaxBytes = int(min(d.uvarint(), 1<<40))
		n := d.count()
		q.Keys = make([][]byte, n)
		for i := range q.Keys {
			q.Keys[i] = d.bytes()
		}
	case api.QueryScan:
		q.Scan.Prefix, q.Scan.Start = d.bytes(), d.bytes()
		q.Scan.Limit = int(min(d.uvarint(), 1<<20))
	default:
		return q, fmt.Errorf("query: unknown kind %d", q.Kind)
	}
	return q, d.end()
}

// EncodeAnswer appends the encoding of a copy's answer to q to dst. A
// batch get whose values pass q.MaxBytes is encoded as too large instead.
func EncodeAnswer(dst []byte, kind api.QueryKind, a api.QueryAnswer, tooLarge string) []byte {
	status := byte(answerOK)
	if tooLarge != "" {
		status = answerTooLarge
	}
	dst = append(dst, queryVersion, status)
	dst = appendBytes(dst, []byte(a.Member))
	dst = appendBytes(dst, []byte(a.Role))
	dst = binary.AppendUvarint(dst, a.Seq)
	if tooLarge != "" {
		return appendBytes(dst, []byte(tooLarge))
	}
	switch kind {
	case api.QueryGet, api.QueryGetMany:
		dst = binary.AppendUvarint(dst, uint64(len(a.Values)))
		for _, v := range a.Values {
			if v == nil {
				dst = append(dst, 0)
				continue
			}
			dst = append(dst, 1)
			dst = appendBytes(dst, v)
		}
	case api.QueryScan:
		dst = binary.AppendUvarint(dst, uint64(len(a.Items)))
		for _, kv := range a.Items {
			dst = appendBytes(dst, kv.Key)
			dst = appendBytes(dst, kv.Value)
		}
	}
	return dst
}

// DecodeAnswer decodes a copy's answer to a query of kind; its slices
// alias b.
func DecodeAnswer(kind api.QueryKind, b []byte) (QueryAnswer, error) {
	d := decoder{b: b}
	var a QueryAnswer
	if v := d.byte(); v != queryVersion {
		return a, fmt.Errorf("query answer: version %d, want %d", v, queryVersion)
	}
	status := d.byte()
	a.Member, a.Role = string(d.bytes()), string(d.bytes())
	a.Seq = d.uvarint()
	if status == answerTooLarge {
		a.Err = fmt.Errorf("%w: %s", api.ErrTooLarge, d.bytes())
		return a, d.end()
	}
	switch kind {
	case api.QueryGet, api.QueryGetMany:
		a.Values = make([][]byte, d.count())
		for i := range a.Values {
			if d.byte() == 1 {
				a.Values[i] = d.bytes()
				if a.Values[i] == nil {
					a.Values[i] = []byte{}
				}
			}
		}
	case api.QueryScan:
		a.Items = make([]api.KV, d.count())
		for i := range a.Items {
			a.Items[i] = api.KV{Key: d.bytes(), Value: d.bytes()}
			if a.Items[i].Value == nil {
				a.Items[i].Value = []byte{}
			}
		}
	}
	return a, d.end()
}

func appendBytes(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

// decoder reads what EncodeQuery and EncodeAnswer write; its first error
// sticks, and every read after it returns zero values.
type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("message ends early")

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = cmpErr(d.err, errShort)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a list's length, which cannot pass the bytes left (each
// item takes one at least).
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err = cmpErr(d.err, fmt.Errorf("a list of %d items in %d bytes", n, len(d.b)))
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errShort
		return nil
	}
	if n == 0 {
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) end() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d bytes after the end", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("decode query message: %w", d.err)
	}
	return nil
}

func cmpErr(have, err error) error {
	if have != nil {
		return have
	}
	return err
}

// ErrNoCopy is the error of a query that no copy met within its deadline.
var ErrNoCopy = errors.New("no copy of the task met the query's bound")

// Query backoff: how long a requester waits for an answer before it asks
// again, doubling from the first to the last.
const (
	queryFirstWait = 5 * time.Millisecond
	queryMaxWait   = 250 * time.Millisecond
)

// Requester asks the copies of a group's tasks their queries over one
// connection. It has one subscription for every answer (a wildcard inbox),
// so that a query asked again keeps its reply subject and an answer late
// for one ask still counts. It is safe for concurrent use; Close it.
type Requester struct {
	nc    *nats.Conn
	group string
	sub   *nats.Subscription
	base  string // inbox prefix, ending in '.'

	mu      sync.Mutex
	next    uint64
	waiting map[string]chan *nats.Msg
}

// NewRequester subscribes to its answers on nc.
func NewRequester(nc *nats.Conn, group string) (*Requester, error) {
	r := &Requester{nc: nc, group: group, base: nc.NewInbox() + ".", waiting: map[string]chan *nats.Msg{}}
	sub, err := nc.Subscribe(r.base+"*", r.onAnswer)
	if err != nil {
		return nil, fmt.Errorf("subscribe to query answers: %w", err)
	}
	r.sub = sub
	return r, nil
}

// Close ends the subscription.
func (r *Requester) Close() error { return r.sub.Unsubscribe() }

func (r *Requester) onAnswer(m *nats.Msg) {
	r.mu.Lock()
	ch := r.waiting[m.Subject]
	r.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- m:
	default: // an answer is there already
	}
}

// Ask sends q to the copies of task and returns the first answer, asking
// again with backoff while none comes (no copy meets the bound yet, or no
// member holds one), until ctx ends: then it fails with an error wrapping
// ErrNoCopy.
func (r *Requester) Ask(ctx context.Context, task string, q QueryRequest) (QueryAnswer, error) {
	data := EncodeQuery(nil, q)
	r.mu.Lock()
	r.next++
	reply := r.base + strconv.FormatUint(r.next, 36)
	ch := make(chan *nats.Msg, 1)
	r.waiting[reply] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiting, reply)
		r.mu.Unlock()
	}()
	subj := QuerySubject(r.group, task)
	wait := queryFirstWait
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	asks := 0
	for {
		if err := r.nc.PublishRequest(subj, reply, data); err != nil {
			return QueryAnswer{}, fmt.Errorf("ask the copies of task %s: %w", task, err)
		}
		asks++
		timer.Reset(wait)
	answers:
		for {
			select {
			case m := <-ch:
				if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
					// No member subscribes (no copy anywhere yet): ask
					// again after the wait.
					continue
				}
				a, err := DecodeAnswer(q.Kind, m.Data)
				if err != nil {
					return QueryAnswer{}, fmt.Errorf("answer to a query of task %s: %w", task, err)
				}
				return a, nil
			case <-timer.C:
				break answers
			case <-ctx.Done():
				return QueryAnswer{}, fmt.Errorf("%w: task %s, %d asks: %w", ErrNoCopy, task, asks, ctx.Err())
			}
		}
		wait = min(2*wait, queryMaxWait)
	}
}
