package changelog

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// WrongLastSequence reports whether err is JetStream's answer to a failed
// fence: a publish that expected a last sequence (of its subject, or of
// another subject) that has moved on. The server answers "wrong last
// sequence" with one of two codes (the second on replicated streams). It is
// the one fence check of the changelog and of the group's KV writes.
func WrongLastSequence(err error) (*jetstream.APIError, bool) {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return apiErr, true
	}
	return nil, false
}
