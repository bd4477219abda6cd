package changelog

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
)

// errCodeNoMessage is JetStream's error code for a message get that finds
// nothing.
const errCodeNoMessage = 10037

// msgGetRequest and msgGetResponse are the JetStream API's message get
// ($JS.API.STREAM.MSG.GET.<stream>) as far as LastFromLeader needs them.
type msgGetRequest struct {
	LastBySubject string `json:"last_by_subj"`
}

type msgGetResponse struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error,omitempty"`
	Message *struct {
		Sequence uint64 `json:"seq"`
	} `json:"message,omitempty"`
}

// LastFromLeader returns the stream sequence of the last message on
// task's subject, or 0 when the subject is empty, as the stream's leader
// has it: every append acknowledged before the call is at or below it.
// Last, a direct get, may be answered by a replica that has not applied
// the newest appends yet on a replicated stream; this is the API's message
// get, which only the leader answers.
func (l *Log) LastFromLeader(ctx context.Context, task string) (uint64, error) {
	return LastFromLeader(ctx, l.js.Conn(), l.group, task)
}

// LastFromLeader is Log.LastFromLeader for a reader that has not opened
// the changelog (Open may change the stream's settings): the group's
// stream must exist.
func LastFromLeader(ctx context.Context, nc *nats.Conn, group, task string) (uint64, error) {
	req, err := json.Marshal(msgGetRequest{LastBySubject: Subject(group, task)})
	if err != nil {
		return 0, err
	}
	subj := "$JS.API.STREAM.MSG.GET." + StreamName(group)
	msg, err := nc.RequestWithContext(ctx, subj, req)
	if err != nil {
		return 0, fmt.Errorf("last sequence of task %q from the stream's leader: %w", task, err)
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("last sequence of task %q from the stream's leader: decode %q: %w", task, msg.Data, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == errCodeNoMessage:
		return 0, nil
	case resp.Error != nil:
		return 0, fmt.Errorf("last sequence of task %q from the stream's leader: %s (code %d)", task, resp.Error.Description, resp.Error.ErrCode)
	case resp.Message == nil:
		return 0, fmt.Errorf("last sequence of task %q from the stream's leader: the answer %q has no message", task, msg.Data)
	}
	return resp.Message.Sequence, nil
}
