package group

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// HandoffSubject is where member hears of the stateless tasks handed over
// to it directly (core NATS). A stateful task's hand-off goes through its
// changelog instead, which the successor already tails.
func HandoffSubject(group, member string) string {
	return "handoff." + group + ".handoff." + member
}

// Handoff tells a member that the owner of a stateless task released it
// and handed it over to the member at Epoch, as the revoke asked.
type Handoff struct {
	Task  string    `json:"task"`
	Epoch uint64    `json:"epoch"`
	From  string    `json:"from"`
	At    time.Time `json:"at"`
}

// PublishHandoff sends h to member to over core NATS. It is a shortcut:
// the member record of the old owner carries the release too, and the
// leader hands the task over from it if the message is lost.
func PublishHandoff(nc *nats.Conn, group, to string, h Handoff) error {
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode hand-off of %s: %w", h.Task, err)
	}
	if err := nc.Publish(HandoffSubject(group, to), b); err != nil {
		return fmt.Errorf("publish hand-off of %s to %s: %w", h.Task, to, err)
	}
	return nil
}

// WatchHandoffs calls fn with every hand-off sent to member, from a NATS
// subscription, until the returned stop is called. fn runs on the
// subscription's goroutine.
func WatchHandoffs(nc *nats.Conn, group, member string, fn func(Handoff)) (stop func(), err error) {
	sub, err := nc.Subscribe(HandoffSubject(group, member), func(m *nats.Msg) {
		var h Handoff
		if json.Unmarshal(m.Data, &h) == nil {
			fn(h)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to hand-offs of %s: %w", member, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}
