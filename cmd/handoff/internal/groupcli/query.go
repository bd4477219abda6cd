package groupcli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strconv"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
)

// queryResult is what 'handoff query --json' prints.
type queryResult struct {
	Task   string `json:"task"`
	Key    []byte `json:"key"`
	Value  []byte `json:"value"` // null: the key is absent at seq
	Found  bool   `json:"found"`
	Member string `json:"member"`
	Role   string `json:"role"`
	Seq    uint64 `json:"seq"`
}

// Query runs 'handoff query': one key of a task's state, asked of the
// group's copies over NATS, as a member routes a query it cannot answer.
func Query(ctx context.Context, args []string, e Env) error {
	var cf clientFlags
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	fs.SetOutput(e.Stdout)
	cf.register(fs, e)
	minSeq := fs.Uint64("min-seq", 0, "accept only a copy that has applied the task's changelog up to this `seq` (a commit's seq) or later")
	maxLag := fs.String("max-lag", "", "accept a copy up to this many changelog `messages` behind the task's end (a standby or learner); empty: none")
	timeout := fs.Duration("timeout", api.DefaultQueryTimeout, "how long to wait for a copy that meets the bound")
	asJSON := fs.Bool("json", false, "print the answer as JSON (task, key, value in base64, found, member, role, seq)")
	fs.Usage = func() {
		fmt.Fprint(e.Stdout, "Usage: handoff query [--group NAME] [--nats URL] [--min-seq S] [--max-lag N] [--json] TASK KEY\n\n"+
			"Reads one key of a task's state from the group's members over NATS, without\n"+
			"an agent of its own: the value is printed as it is, followed by a newline.\n"+
			"By default the answer reflects every commit acknowledged before the query;\n"+
			"--min-seq and --max-lag accept staler copies. The copy that answered and\n"+
			"the sequence it had applied go to the JSON form. An absent key is an error.\n"+
			"Flags may come before or after TASK KEY; put -- before a key that starts with -.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return fmt.Errorf("query takes a task and a key, and got %d arguments besides the flags (%q); put -- before a key that starts with -", len(pos), pos)
	}
	task, key := pos[0], pos[1]
	b := api.Bound{MinSeq: *minSeq}
	if *maxLag != "" {
		n, err := strconv.ParseUint(*maxLag, 10, 64)
		if err != nil {
			return fmt.Errorf("--max-lag %q: give a number of changelog messages", *maxLag)
		}
		b.MaxLag, b.Lagged = n, true
	}
	nc, kv, err := cf.openConn(ctx, "handoff-query")
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg, _, ok, err := group.LoadConfig(ctx, kv)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("group %q has no config yet (no agent has started it)", cf.group)
	}
	tasks, err := cfg.Tasks()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(tasks, func(t assign.Task) bool { return t.ID == task })
	switch {
	case i < 0:
		return fmt.Errorf("task %s is not in group %s", task, cf.group)
	case !tasks[i].Stateful:
		return fmt.Errorf("task %s is stateless: it has no state to query", task)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if b.Latest() {
		// As a member does: the subject's last sequence, read after the
		// query began, is what every copy that answers has applied.
		if b.MinSeq, err = changelog.LastFromLeader(ctx, nc, cf.group, task); err != nil {
			return err
		}
	}
	r, err := group.NewRequester(nc, cf.group)
	if err != nil {
		return err
	}
	defer r.Close()
	ans, err := r.Ask(ctx, task, group.QueryRequest{Kind: api.QueryGet, Bound: b, Keys: [][]byte{[]byte(key)}})
	if err != nil {
		return fmt.Errorf("%w; is a member of group %s holding a copy of %s running?", err, cf.group, task)
	}
	if ans.Err != nil {
		return ans.Err
	}
	val := ans.Values[0]
	if *asJSON {
		return json.NewEncoder(e.Stdout).Encode(queryResult{Task: task, Key: []byte(key), Value: val, Found: val != nil,
			Member: ans.Member, Role: ans.Role, Seq: ans.Seq})
	}
	if val == nil {
		return fmt.Errorf("task %s has no key %q at seq %d (member %s's copy, %s)", task, key, ans.Seq, ans.Member, ans.Role)
	}
	_, err = fmt.Fprintf(e.Stdout, "%s\n", val)
	return err
}
