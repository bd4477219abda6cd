// Package restore replays a task's changelog into the local store: from the
// store's applied sequence to the end, or on and on while the member is a
// learner or a standby (tailing), reporting its progress as it goes.
package restore
