// Package cluster runs the members of a handoff group for the harnesses
// that drive one: the lab behind `handoff-lab demo` and `handoff-lab bench`
// (internal/lab), the multi-process scenarios (internal/scenario) and the
// agent's tests. It has two backends:
//
//   - Local, a member in this process, wired as the binary wires one
//     (internal/sidecar) on NATS connections of its own, optionally with a
//     counter worker (countworker) in this process too;
//   - Process, a member as the deployment runs one: a `handoff agent`
//     process and an examples/counter worker process talking to it over
//     its API (the programs and nats-server come from internal/proc), with
//     readers of the agent's JSON log (AgentLog) and of the worker's event
//     log (EventLog), the one way the harnesses read what processes did.
//
// Group reads the group's state from its KV bucket without going through
// an agent, and StartNATS starts nats-server processes. What each harness
// adds — the lab's recorder, the scenarios' faults and checks, the agent
// tests' assertions — stays with it. Nothing here is for production, and
// the sidecar's binary links none of it.
package cluster
