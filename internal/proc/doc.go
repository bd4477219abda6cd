// Package proc runs handoff's programs as OS processes on loopback, for the
// harnesses of multi-process runs (internal/cluster's Process members, on
// which the scenarios and the bench of processes run): it builds the
// binaries from this module (handoff, the example counter worker, and
// nats-server at go.mod's version), starts and signals processes in process
// groups of their own that die with their parent, prepares nats-server
// nodes with JetStream, and reads the JSON lines the processes append to
// their logs. Nothing here is for production.
package proc
