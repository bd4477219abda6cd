// Package changelog is a group's changelog on NATS JetStream: one stream per
// group, one subject per task, one message per commit. It owns the stream's
// settings, the binary encoding of a commit and the fenced append that keeps
// a stale owner from writing. It is a package of its own because both the
// writer (agent) and the reader (restore) use it and neither is its home.
package changelog
