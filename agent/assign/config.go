package assign

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is a group's configuration: its tasks and the rules the leader
// places them by. It is stored in the group's KV bucket when the group is
// created; every member must agree with it. The assignor reads the placement
// fields; the agents read the timeouts.
type Config struct {
	// Stateful and Stateless are task specs: comma-separated IDs or ranges
	// such as "orders-0..63". Expand them with Tasks.
	Stateful  []string `json:"stateful,omitempty" yaml:"stateful,omitempty"`
	Stateless []string `json:"stateless,omitempty" yaml:"stateless,omitempty"`

	Handover Mode `json:"handover" yaml:"handover"`
	// AcceptableLag is how many changelog messages a learner may still be
	// behind when it is promoted.
	AcceptableLag uint64 `json:"acceptableLag" yaml:"acceptableLag"`
	// MaxLearners bounds learners in flight over the whole group, and
	// MaxLearnersPerMember on any one member; both apply. Zero means no
	// bound. They count the learners still catching up: one whose task is
	// being revoked to it no longer counts. Standbys being built for a
	// standby move count after the learners.
	MaxLearners          int `json:"maxLearners" yaml:"maxLearners"`
	MaxLearnersPerMember int `json:"maxLearnersPerMember" yaml:"maxLearnersPerMember"`
	// Standbys is how many warm copies of each stateful task are kept on
	// members other than its owner.
	Standbys int `json:"standbys" yaml:"standbys"`

	// SessionTimeout is how long a member's record lives without a
	// heartbeat before the member counts as dead.
	SessionTimeout Duration `json:"sessionTimeout" yaml:"sessionTimeout"`
	// LeaveTimeout bounds a graceful leave: after it, a leaving member's
	// remaining tasks move even if their learners have not caught up.
	LeaveTimeout Duration `json:"leaveTimeout" yaml:"leaveTimeout"`
	// ReleaseTimeout is how long the leader waits for a revoked task's
	// release before it moves the task anyway (the old owner is fenced).
	ReleaseTimeout Duration `json:"releaseTimeout" yaml:"releaseTimeout"`
	// StableMaxWait is how long a stable round waits for all its learners
	// before caught-up learners are promoted one by one.
	StableMaxWait Duration `json:"stableMaxWait" yaml:"stableMaxWait"`
}

// DefaultConfig returns the defaults for a new group with no tasks.
func DefaultConfig() Config {
	return Config{
		Handover:             Eager,
		AcceptableLag:        100,
		MaxLearners:          0,
		MaxLearnersPerMember: 4,
		Standbys:             0,
		SessionTimeout:       Duration(6 * time.Second),
		LeaveTimeout:         Duration(5 * time.Minute),
		ReleaseTimeout:       Duration(10 * time.Second),
		StableMaxWait:        Duration(2 * time.Minute),
	}
}

// ValidTaskID reports whether id can name a task: 1 to 128 letters, digits,
// '-' or '_' (a task ID is one token of a NATS subject).
func ValidTaskID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// maxTasks bounds a group's size so that a typo in a range cannot make a
// member allocate without limit.
const maxTasks = 100_000

// ExpandSpec expands one task spec: comma-separated IDs, each either a plain
// ID or a range "prefix-A..B" (A <= B, decimal) that stands for prefix-A,
// prefix-A+1, ... prefix-B.
func ExpandSpec(spec string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		dots := strings.Index(part, "..")
		if dots < 0 {
			if !ValidTaskID(part) {
				return nil, fmt.Errorf("task ID %q: use 1 to 128 letters, digits, '-' or '_'", part)
			}
			out = append(out, part)
			continue
		}
		head, hi := part[:dots], part[dots+2:]
		i := len(head)
		for i > 0 && head[i-1] >= '0' && head[i-1] <= '9' {
			i--
		}
		prefix, lo := head[:i], head[i:]
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		if lo == "" || errA != nil || errB != nil || a > b {
			return nil, fmt.Errorf("task range %q: write it as prefix-FIRST..LAST, e.g. orders-0..63", part)
		}
		if b-a+1 > maxTasks {
			return nil, fmt.Errorf("task range %q has %d tasks; at most %d are allowed", part, b-a+1, maxTasks)
		}
		// IDs of a range share their characters and grow in length, so the
		// range is valid if its first and last IDs are.
		if first, last := prefix+strconv.Itoa(a), prefix+strconv.Itoa(b); !ValidTaskID(first) || !ValidTaskID(last) {
			for n := a; n <= b; n++ {
				if id := prefix + strconv.Itoa(n); !ValidTaskID(id) {
					return nil, fmt.Errorf("task ID %q from range %q: use 1 to 128 letters, digits, '-' or '_'", id, part)
				}
			}
		}
		out = appendRange(out, prefix, a, b)
	}
	return out, nil
}

// appendRange appends prefix+a ... prefix+b to out, all cut from one string
// so that a large range costs two allocations rather than one per ID.
func appendRange(out []string, prefix string, a, b int) []string {
	n := b - a + 1
	buf := make([]byte, 0, n*(len(prefix)+len(strconv.Itoa(b))))
	ends := make([]int, 0, n)
	for i := a; i <= b; i++ {
		buf = append(buf, prefix...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		ends = append(ends, len(buf))
	}
	all := string(buf)
	start := 0
	for _, end := range ends {
		out = append(out, all[start:end])
		start = end
	}
	return out
}

// Tasks expands the config's task specs into tasks sorted by ID.
func (c Config) Tasks() ([]Task, error) {
	var out []Task
	add := func(specs []string, stateful bool) error {
		for _, s := range specs {
			ids, err := ExpandSpec(s)
			if err != nil {
				return err
			}
			for _, id := range ids {
				out = append(out, Task{ID: id, Stateful: stateful})
			}
		}
		return nil
	}
	if err := add(c.Stateful, true); err != nil {
		return nil, err
	}
	if err := add(c.Stateless, false); err != nil {
		return nil, err
	}
	if len(out) > maxTasks {
		return nil, fmt.Errorf("the group has %d tasks; at most %d are allowed", len(out), maxTasks)
	}
	slices.SortFunc(out, func(a, b Task) int { return strings.Compare(a.ID, b.ID) })
	for i := 1; i < len(out); i++ {
		if out[i].ID == out[i-1].ID {
			return nil, fmt.Errorf("task %q is listed twice; each task is either stateful or stateless, once", out[i].ID)
		}
	}
	return out, nil
}

// Validate reports the first problem with c, in words that say how to fix it.
func (c Config) Validate() error {
	var errs []error
	if _, err := c.Tasks(); err != nil {
		errs = append(errs, err)
	}
	if c.Handover != Eager && c.Handover != Stable && c.Handover != Cold {
		errs = append(errs, fmt.Errorf("handover mode %q: use eager or stable (or cold, the no-learner baseline)", c.Handover))
	}
	if c.MaxLearners < 0 || c.MaxLearnersPerMember < 0 {
		errs = append(errs, errors.New("max learners must be 0 (no bound) or more"))
	}
	if c.Standbys < 0 {
		errs = append(errs, errors.New("standbys must be 0 or more"))
	}
	if c.SessionTimeout.D() < 2*time.Second {
		errs = append(errs, fmt.Errorf("session timeout %s: use at least 2s (NATS KV TTLs start at 1s and heartbeats need room)", c.SessionTimeout.D()))
	}
	if c.LeaveTimeout.D() <= 0 || c.ReleaseTimeout.D() <= 0 || c.StableMaxWait.D() <= 0 {
		errs = append(errs, errors.New("leave timeout, release timeout and stable max wait must be positive durations such as 30s"))
	}
	return errors.Join(errs...)
}

// Diff lists, as "field: stored -> proposed" lines, where c and other differ.
// An empty result means they agree.
func (c Config) Diff(other Config) []string {
	var d []string
	cmp := func(name string, a, b any) {
		if fmt.Sprint(a) != fmt.Sprint(b) {
			d = append(d, fmt.Sprintf("%s: %v -> %v", name, a, b))
		}
	}
	tasks := func(name string, a, b []string) {
		if !sameTasks(a, b) {
			d = append(d, fmt.Sprintf("%s: %v -> %v", name, a, b))
		}
	}
	tasks("stateful", c.Stateful, other.Stateful)
	tasks("stateless", c.Stateless, other.Stateless)
	cmp("handover", c.Handover, other.Handover)
	cmp("acceptableLag", c.AcceptableLag, other.AcceptableLag)
	cmp("maxLearners", c.MaxLearners, other.MaxLearners)
	cmp("maxLearnersPerMember", c.MaxLearnersPerMember, other.MaxLearnersPerMember)
	cmp("standbys", c.Standbys, other.Standbys)
	cmp("sessionTimeout", c.SessionTimeout.D(), other.SessionTimeout.D())
	cmp("leaveTimeout", c.LeaveTimeout.D(), other.LeaveTimeout.D())
	cmp("releaseTimeout", c.ReleaseTimeout.D(), other.ReleaseTimeout.D())
	cmp("stableMaxWait", c.StableMaxWait.D(), other.StableMaxWait.D())
	return d
}

// sameTasks reports whether two lists of task specs name the same tasks,
// whatever their order or notation ("a-0..3" and "a-3,a-2,a-1,a-0"
// agree). Specs that do not expand are compared as written.
func sameTasks(a, b []string) bool {
	expand := func(specs []string) ([]string, error) {
		var ids []string
		for _, s := range specs {
			more, err := ExpandSpec(s)
			if err != nil {
				return nil, err
			}
			ids = append(ids, more...)
		}
		slices.Sort(ids)
		return ids, nil
	}
	ea, errA := expand(a)
	eb, errB := expand(b)
	if errA != nil || errB != nil {
		return fmt.Sprint(a) == fmt.Sprint(b)
	}
	return slices.Equal(ea, eb)
}
