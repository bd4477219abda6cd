// Package fence recognises JetStream's answer to a failed fence: a publish
// that expected a last sequence (of its subject, or of another subject)
// that has moved on. The changelog's appends and the group's KV writes (the
// leader's lease, the writes fenced on it, member records) are all fenced
// that way, and each recognises the refusal here, in one place. It depends
// on nats.go's jetstream alone, so that agent/group need not import
// changelog for it.
package fence

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// WrongLastSequence reports whether err is a failed fence, and returns the
// server's answer. The server answers "wrong last sequence" with one of two
// codes (the second on replicated streams).
func WrongLastSequence(err error) (*jetstream.APIError, bool) {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return apiErr, true
	}
	return nil, false
}
