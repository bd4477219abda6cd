package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/handoffhq/handoff/agent"
	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/agent/group"
	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/changelog"
	"github.com/handoffhq/handoff/httpapi"
	"github.com/handoffhq/handoff/internal/natsembed"
	"github.com/handoffhq/handoff/internal/redact"
	"github.com/handoffhq/handoff/snapshot"
	"github.com/handoffhq/handoff/statestore"
)

// Config is everything 'handoff agent' is configured by. Every setting has
// one name, used as the flag (--name), the environment variable
// (HANDOFF_NAME, dashes as underscores) and the key of the YAML config
// file. Flags override the environment, which overrides the file.
type Config struct {
	ConfigFile string

	Group     string
	MemberID  string
	Listen    string
	Advertise string
	DataDir   string
	Zone      string
	Capacity  int
	APIToken  string
	// API guards: the Host names it answers to besides localhost, IP
	// addresses and --listen's host; how long a client may take to send
	// headers and then a body; how many connections it keeps open, how
	// many requests it runs and how many long-polls it holds at once.
	APIAllowedHosts      string
	APIReadHeaderTimeout time.Duration
	APIBodyTimeout       time.Duration
	APIMaxConns          int
	APIMaxRequests       int
	APIMaxLongPolls      int
	// APISocketGroup, with --listen unix:PATH, is the group that may use
	// the socket besides the agent's user.
	APISocketGroup string
	// MetricsListen is a second listener that serves /metrics and the
	// probes alone, without the token.
	MetricsListen string

	// RequireWorker makes the member take active tasks only while its
	// worker is attached to the API; WorkerTimeout is how long a detached
	// worker keeps its active tasks before the agent releases them.
	RequireWorker bool
	WorkerTimeout time.Duration

	NATS nats

	// StoreMinFreeMB is the free space the local store keeps on its disk
	// (0: no reserve); OnCorruptStore what a start does with a corrupt one.
	StoreMinFreeMB int
	// StoreCacheMB bounds the local store's block cache;
	// StoreRecordCacheMB the record caches of the active tasks (0: off).
	StoreCacheMB       int
	StoreRecordCacheMB int
	OnCorruptStore     string
	// AcceptStateLoss is a task spec: tasks this member starts empty when
	// their state is lost (their changelog was purged).
	AcceptStateLoss []string

	// Snapshots configure the snapshots this member takes of the tasks it
	// owns; SnapshotsOn is their on/off switch (Snapshots.Disabled is set
	// from it, so that the flag reads positively).
	Snapshots   agent.SnapshotOptions
	SnapshotsOn bool

	// GroupConfig is this member's proposal for the group's config.
	GroupConfig assign.Config

	LogLevel    string
	LogFormat   string
	PrintConfig bool
}

// nats holds how to reach NATS; shared by every subcommand that connects.
type nats struct {
	URL            string
	EmbeddedListen string
	SyncAlways     bool
	Creds          string
	User           string
	Password       string
	Token          string
	TLSCA          string
	TLSCert        string
	TLSKey         string
	Replicas       int
}

// DefaultConfig returns the settings of an agent started with no flags.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Group:                "default",
		MemberID:             sanitizeMemberID(host),
		Listen:               "127.0.0.1:7070",
		DataDir:              "handoff-data",
		Capacity:             1,
		APIReadHeaderTimeout: httpapi.DefaultReadHeaderTimeout,
		APIBodyTimeout:       httpapi.DefaultBodyReadTimeout,
		APIMaxConns:          httpapi.DefaultMaxConns,
		APIMaxRequests:       httpapi.DefaultMaxRequests,
		APIMaxLongPolls:      httpapi.DefaultMaxLongPolls,
		NATS:                 nats{EmbeddedListen: "127.0.0.1:4222", Replicas: 1},
		GroupConfig:          assign.DefaultConfig(),
		SnapshotsOn:          true,

		StoreMinFreeMB:     statestore.DefaultMinFree >> 20,
		StoreCacheMB:       statestore.DefaultCacheBytes >> 20,
		StoreRecordCacheMB: agent.DefaultRecordCacheBytes >> 20,
		OnCorruptStore:     string(statestore.Rebuild),
		Snapshots: agent.SnapshotOptions{
			Every:    agent.DefaultSnapshotEvery,
			Interval: agent.DefaultSnapshotInterval,
			Keep:     snapshot.DefaultKeep,
			Margin:   snapshot.DefaultMargin,
		},
		RequireWorker: true,
		WorkerTimeout: agent.DefaultWorkerTimeout,
		LogLevel:      "info",
		LogFormat:     "auto",
	}
}

// sanitizeMemberID turns a host name into a valid member ID.
func sanitizeMemberID(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	if b.Len() == 0 {
		return "member"
	}
	id := b.String()
	if len(id) > 128 {
		id = id[:128]
	}
	return id
}

// groupFields maps the flags that set the group's config to the JSON names
// of assign.Config, so that only settings a member gave are compared with
// the stored config.
var groupFields = map[string]string{
	"tasks":                   "stateful",
	"stateless-tasks":         "stateless",
	"handover":                "handover",
	"acceptable-lag":          "acceptableLag",
	"max-learners":            "maxLearners",
	"max-learners-per-member": "maxLearnersPerMember",
	"standbys":                "standbys",
	"session-timeout":         "sessionTimeout",
	"leave-timeout":           "leaveTimeout",
	"release-timeout":         "releaseTimeout",
	"stable-max-wait":         "stableMaxWait",
}

// natsFlags registers the flags that say how to reach NATS.
func natsFlags(fs *flag.FlagSet, n *nats, urlUsage string) {
	fs.StringVar(&n.URL, "nats", n.URL, urlUsage)
	fs.StringVar(&n.Creds, "nats-creds", n.Creds, "NATS credentials `file`")
	fs.StringVar(&n.User, "nats-user", n.User, "NATS user `name` (with --nats-password)")
	fs.StringVar(&n.Password, "nats-password", n.Password, "NATS `password`")
	fs.StringVar(&n.Token, "nats-token", n.Token, "NATS authentication `token` (instead of a user and password)")
	fs.StringVar(&n.TLSCA, "nats-tls-ca", n.TLSCA, "CA `file` to verify the NATS server")
	fs.StringVar(&n.TLSCert, "nats-tls-cert", n.TLSCert, "client certificate `file` for NATS (with --nats-tls-key)")
	fs.StringVar(&n.TLSKey, "nats-tls-key", n.TLSKey, "client key `file` for NATS")
}

// agentFlags registers every setting of 'handoff agent' on a new FlagSet,
// bound to c's fields with c's current values as defaults.
func agentFlags(c *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.StringVar(&c.ConfigFile, "config", c.ConfigFile, "YAML config `file`: keys are these flags' names")
	fs.StringVar(&c.Group, "group", c.Group, "`name` of the group (letters, digits, '-', '_')")
	fs.StringVar(&c.MemberID, "member-id", c.MemberID, "this member's `ID`, stable across restarts (default: the host name)")
	fs.StringVar(&c.Listen, "listen", c.Listen, "`address` of the worker API: host:port, or unix:PATH for a Unix domain socket (mode 0600)")
	fs.StringVar(&c.Advertise, "advertise", c.Advertise, "API `address` other members and 'handoff status' show (default: --listen)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "`directory` of the local state (and of the embedded NATS server)")
	fs.StringVar(&c.Zone, "zone", c.Zone, "failure `zone` of this member; standbys go to other zones")
	fs.IntVar(&c.Capacity, "capacity", c.Capacity, "capacity `weight` of this member's share of tasks")
	fs.StringVar(&c.APIToken, "api-token", c.APIToken, "if set, API calls but health checks need 'Authorization: Bearer TOKEN'")
	fs.BoolVar(&c.RequireWorker, "require-worker", c.RequireWorker, "take active tasks only while a worker polls GET /assignment (--require-worker=false for an agent with no worker)")
	fs.DurationVar(&c.WorkerTimeout, "worker-timeout", c.WorkerTimeout, "a worker gone this `long` loses its active tasks: the agent releases them and they move")

	fs.StringVar(&c.APIAllowedHosts, "api-allowed-hosts", c.APIAllowedHosts, "host `names` (comma-separated) the API answers to besides localhost, IP addresses and the hosts of --listen and --advertise; * for any")
	fs.DurationVar(&c.APIReadHeaderTimeout, "api-read-header-timeout", c.APIReadHeaderTimeout, "the API closes a connection whose request headers take `longer`")
	fs.DurationVar(&c.APIBodyTimeout, "api-body-timeout", c.APIBodyTimeout, "the API answers 408 to a request whose body takes `longer` to arrive (long-polls have none)")
	fs.IntVar(&c.APIMaxConns, "api-max-conns", c.APIMaxConns, "`connections` the API keeps open at once; a new one replaces the oldest whose body stalls (or whose headers stall, or that is idle), else is answered 503")
	fs.IntVar(&c.APIMaxRequests, "api-max-requests", c.APIMaxRequests, "`requests` (long-polls aside) the API runs at once, each counted once its body is in; more are answered 503 at once. As many bodies may arrive besides; past that a new one replaces the oldest that stalls")
	fs.IntVar(&c.APIMaxLongPolls, "api-max-long-polls", c.APIMaxLongPolls, "`long-polls` of /assignment the API holds at once; past it the oldest answers at once")
	fs.StringVar(&c.APISocketGroup, "api-socket-group", c.APISocketGroup, "with --listen unix:PATH: the `group` (name or ID) whose members may use the socket too; it is made that group's, mode 0660 (default: mode 0600, the agent's user only)")
	fs.StringVar(&c.MetricsListen, "metrics-listen", c.MetricsListen, "if set, a second `address` (host:port) that serves GET /metrics, /healthz and /readyz alone, without the API token: for Prometheus and probes when the API is on a Unix socket or 127.0.0.1")

	fs.IntVar(&c.StoreMinFreeMB, "store-min-free-mb", c.StoreMinFreeMB, "free `MiB` the local store keeps on its disk: below it commits are refused (503) and a start waits (0 = no reserve; a start still waits for room to open the store)")
	fs.IntVar(&c.StoreCacheMB, "store-cache-mb", c.StoreCacheMB, "`MiB` of memory the local store may keep read blocks in (Pebble's block cache, filled as state is read); reads of state beyond it cost several times more")
	fs.IntVar(&c.StoreRecordCacheMB, "store-record-cache-mb", c.StoreRecordCacheMB, "`MiB` of memory the record caches of this member's active tasks may hold together: the values (and absence) of keys the worker read, in front of the local store, updated by its commits (0 = off)")
	fs.Var(specValue{&c.AcceptStateLoss}, "accept-state-loss", "stateful task `IDs` (like --tasks) this member starts empty although the group shows they had state that is gone (their changelog was purged); remove once they run")
	fs.StringVar(&c.OnCorruptStore, "on-corrupt-store", c.OnCorruptStore, "`policy` for a local store found corrupt: rebuild (move it aside, restore the tasks from snapshots and the changelog) or fail")

	natsFlags(fs, &c.NATS, "NATS server `URL`s (comma-separated); empty runs an embedded single-node server")
	fs.StringVar(&c.NATS.EmbeddedListen, "embedded-nats-listen", c.NATS.EmbeddedListen, "`address` of the embedded NATS server (when --nats is empty); other than loopback it needs --nats-token or --nats-user and --nats-password, which it then requires of every client")
	fs.BoolVar(&c.NATS.SyncAlways, "nats-sync-always", c.NATS.SyncAlways, "embedded NATS fsyncs every write (durable on power loss; slower)")
	fs.IntVar(&c.NATS.Replicas, "replicas", c.NATS.Replicas, "JetStream `replicas` of the changelog and KV bucket (3 on a 3-node cluster)")

	sn := &c.Snapshots
	fs.BoolVar(&c.SnapshotsOn, "snapshots", c.SnapshotsOn, "take snapshots of owned tasks and trim their changelogs (--snapshots=false to stop)")
	fs.Uint64Var(&sn.Every, "snapshot-every", sn.Every, "snapshot an owned task after this many `commits` to it here")
	fs.DurationVar(&sn.Interval, "snapshot-interval", sn.Interval, "replace a task's snapshot this `old` if the task changed since")
	fs.IntVar(&sn.Keep, "snapshot-keep", sn.Keep, "`snapshots` kept per task; the changelog is trimmed below the oldest")
	fs.Uint64Var(&sn.Margin, "snapshot-margin", sn.Margin, "changelog `messages` kept below the oldest kept snapshot")

	g := &c.GroupConfig
	fs.Var(specValue{&g.Stateful}, "tasks", "stateful task `IDs`: comma-separated, ranges like orders-0..63")
	fs.Var(specValue{&g.Stateless}, "stateless-tasks", "stateless task `IDs`, like --tasks")
	fs.Var((*modeValue)(&g.Handover), "handover", "`mode` of promotion: eager (each learner when caught up), stable (a round at once), or cold (no learners: the baseline that restores after the move)")
	fs.Uint64Var(&g.AcceptableLag, "acceptable-lag", g.AcceptableLag, "changelog `messages` a learner may lag when promoted")
	fs.IntVar(&g.MaxLearners, "max-learners", g.MaxLearners, "most learners in flight in the whole group (0 = no bound)")
	fs.IntVar(&g.MaxLearnersPerMember, "max-learners-per-member", g.MaxLearnersPerMember, "most learners in flight per member (0 = no bound)")
	fs.IntVar(&g.Standbys, "standbys", g.Standbys, "warm `copies` of each stateful task kept for failover")
	fs.TextVar(&g.SessionTimeout, "session-timeout", g.SessionTimeout, "a member silent this `long` is dead")
	fs.TextVar(&g.LeaveTimeout, "leave-timeout", g.LeaveTimeout, "a leave hands remaining tasks over cold after this `long`")
	fs.TextVar(&g.ReleaseTimeout, "release-timeout", g.ReleaseTimeout, "a revoked task moves after this `long` without a release")
	fs.TextVar(&g.StableMaxWait, "stable-max-wait", g.StableMaxWait, "stable mode: a round waits at most this `long` for all its learners")

	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "`level`: trace, debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "`format`: json, console, or auto (console on a terminal)")
	fs.BoolVar(&c.PrintConfig, "print-config", c.PrintConfig, "print the resolved configuration as YAML and exit")
	return fs
}

// specValue is a flag holding one task spec.
type specValue struct{ dst *[]string }

func (v specValue) String() string {
	if v.dst == nil {
		return ""
	}
	return strings.Join(*v.dst, ",")
}

func (v specValue) Set(s string) error {
	if _, err := assign.ExpandSpec(s); err != nil {
		return err
	}
	*v.dst = nil
	if strings.TrimSpace(s) != "" {
		*v.dst = []string{s}
	}
	return nil
}

type modeValue assign.Mode

func (m *modeValue) String() string { return string(*m) }

func (m *modeValue) Set(s string) error {
	switch assign.Mode(s) {
	case assign.Eager, assign.Stable, assign.Cold:
	default:
		return fmt.Errorf("use eager or stable (or cold, the no-learner baseline)")
	}
	*m = modeValue(s)
	return nil
}

// envName is the environment variable of a setting.
func envName(flagName string) string {
	return "HANDOFF_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// loadedConfig is a resolved configuration and which settings were given.
type loadedConfig struct {
	Config
	set map[string]bool // settings given by the file, the environment or a flag
	fs  *flag.FlagSet
}

// loadConfig resolves the agent's settings: defaults, then the config file,
// then HANDOFF_* variables, then flags.
func loadConfig(args []string, getenv func(string) string, usageOut io.Writer) (loadedConfig, error) {
	probe := DefaultConfig()
	pfs := agentFlags(&probe)
	pfs.SetOutput(usageOut)
	pfs.Usage = func() { agentUsage(usageOut, pfs) }
	if err := pfs.Parse(args); err != nil {
		return loadedConfig{}, err
	}
	if pfs.NArg() > 0 {
		return loadedConfig{}, fmt.Errorf("unexpected argument %q; settings are flags (see 'handoff agent --help')", pfs.Arg(0))
	}
	given := map[string]bool{}
	pfs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	lc := loadedConfig{Config: DefaultConfig(), set: map[string]bool{}}
	fs := agentFlags(&lc.Config)
	lc.fs = fs
	path := probe.ConfigFile
	if path == "" {
		path = getenv(envName("config"))
	}
	if path != "" {
		if err := applyFile(fs, path, lc.set); err != nil {
			return loadedConfig{}, err
		}
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && f.Name != "config" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
			lc.set[f.Name] = true
		}
	})
	if err := errors.Join(errs...); err != nil {
		return loadedConfig{}, err
	}
	for name := range given {
		if err := fs.Set(name, pfs.Lookup(name).Value.String()); err != nil {
			return loadedConfig{}, fmt.Errorf("--%s: %w", name, err)
		}
		lc.set[name] = true
	}
	lc.ConfigFile = path
	lc.Snapshots.Disabled = !lc.SnapshotsOn
	if lc.Advertise == "" {
		lc.Advertise = lc.Listen
	}
	return lc, lc.Validate()
}

// applyFile reads a YAML config file whose keys are flag names. Unknown and
// repeated keys are errors. A scalar is taken as written (member-id: 007
// stays "007"), so the file reads like the flags it stands for.
func applyFile(fs *flag.FlagSet, path string, set map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config file %s: line %d: want a mapping of setting names to values, like 'group: orders'", path, root.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i].Value
		if k == "config" || k == "print-config" || fs.Lookup(k) == nil {
			return fmt.Errorf("config file %s: line %d: unknown key %q; keys are the names of 'handoff agent' flags without dashes in front", path, root.Content[i].Line, k)
		}
		if seen[k] {
			return fmt.Errorf("config file %s: line %d: key %q is set twice", path, root.Content[i].Line, k)
		}
		seen[k] = true
		v, err := scalar(root.Content[i+1])
		if err != nil {
			return fmt.Errorf("config file %s: key %q: %w", path, k, err)
		}
		if err := fs.Set(k, v); err != nil {
			return fmt.Errorf("config file %s: key %q: invalid value %q: %w", path, k, v, err)
		}
		set[k] = true
	}
	return nil
}

// scalar turns a YAML value into a flag string: a scalar as written, null as
// empty, a list as its items separated by commas.
func scalar(n *yaml.Node) (string, error) {
	plain := func(n *yaml.Node) (string, bool) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n.Kind != yaml.ScalarNode {
			return "", false
		}
		if n.ShortTag() == "!!null" {
			return "", true
		}
		return n.Value, true
	}
	if v, ok := plain(n); ok {
		return v, nil
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.SequenceNode {
		return "", fmt.Errorf("line %d: a value must be a string, number, boolean or list", n.Line)
	}
	parts := make([]string, len(n.Content))
	for i, e := range n.Content {
		v, ok := plain(e)
		if !ok {
			return "", fmt.Errorf("line %d: a list holds plain values, like [orders-0..7, billing-0..3]", e.Line)
		}
		parts[i] = v
	}
	return strings.Join(parts, ","), nil
}

// validateListen checks --listen and what goes with a socket.
func (c Config) validateListen() []error {
	path, socket := api.SocketPath(c.Listen)
	switch {
	case socket:
		if err := api.CheckSocketPath(path); err != nil {
			return []error{fmt.Errorf("--listen %q: %w", c.Listen, err)}
		}
	case c.APISocketGroup != "":
		return []error{fmt.Errorf("--api-socket-group %q goes with --listen unix:PATH; --listen is %q", c.APISocketGroup, c.Listen)}
	default:
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return []error{fmt.Errorf("--listen %q: use host:port, e.g. 127.0.0.1:7070, or unix:PATH for a Unix socket, e.g. unix:/run/handoff/api.sock", c.Listen)}
		}
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			return []error{fmt.Errorf("--metrics-listen %q: use host:port, e.g. :9090 (every interface, for Prometheus in a pod) or 127.0.0.1:9090", c.MetricsListen)}
		}
	}
	return nil
}

// Validate reports every problem with c, each saying how to fix it.
func (c Config) Validate() error {
	var errs []error
	if !changelog.ValidGroup(c.Group) {
		errs = append(errs, fmt.Errorf("--group %q: use 1 to 64 letters, digits, '-' or '_'", c.Group))
	}
	if !group.ValidMemberID(c.MemberID) {
		errs = append(errs, fmt.Errorf("--member-id %q: use 1 to 128 letters, digits, '-' or '_'", c.MemberID))
	}
	errs = append(errs, c.validateListen()...)
	if c.NATS.URL == "" {
		errs = append(errs, c.NATS.validateEmbedded()...)
	}
	if c.NATS.Token != "" && (c.NATS.User != "" || c.NATS.Creds != "") {
		errs = append(errs, errors.New("--nats-token goes alone: give a token, or --nats-user and --nats-password, or --nats-creds"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is empty: name a directory for the local state"))
	}
	if c.APIReadHeaderTimeout <= 0 || c.APIBodyTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--api-read-header-timeout %s, --api-body-timeout %s: use positive durations such as 10s", c.APIReadHeaderTimeout, c.APIBodyTimeout))
	}
	if c.APIMaxRequests < 1 || c.APIMaxLongPolls < 1 {
		errs = append(errs, fmt.Errorf("--api-max-requests %d, --api-max-long-polls %d: use 1 or more (the worker needs a long-poll and its commits)", c.APIMaxRequests, c.APIMaxLongPolls))
	} else if c.APIMaxConns <= c.APIMaxRequests+c.APIMaxLongPolls {
		errs = append(errs, fmt.Errorf("--api-max-conns %d: use more than --api-max-requests plus --api-max-long-polls (%d), so that a full set of requests leaves room for new connections", c.APIMaxConns, c.APIMaxRequests+c.APIMaxLongPolls))
	}
	if c.Capacity < 1 {
		errs = append(errs, fmt.Errorf("--capacity %d: use 1 or more", c.Capacity))
	}
	if c.RequireWorker && c.WorkerTimeout <= httpapi.DefaultWorkerGrace {
		errs = append(errs, fmt.Errorf("--worker-timeout %v: use more than the %v a worker may take between two polls, e.g. %v", c.WorkerTimeout, httpapi.DefaultWorkerGrace, agent.DefaultWorkerTimeout))
	}
	if c.StoreCacheMB < 1 {
		errs = append(errs, fmt.Errorf("--store-cache-mb %d: use 1 or more", c.StoreCacheMB))
	}
	if c.StoreRecordCacheMB < 0 {
		errs = append(errs, fmt.Errorf("--store-record-cache-mb %d: use 0 (no record cache) or more", c.StoreRecordCacheMB))
	}
	if c.StoreMinFreeMB < 0 {
		errs = append(errs, fmt.Errorf("--store-min-free-mb %d: use 0 (no reserve) or more", c.StoreMinFreeMB))
	}
	switch statestore.CorruptPolicy(c.OnCorruptStore) {
	case statestore.Rebuild, statestore.Fail:
	default:
		errs = append(errs, fmt.Errorf("--on-corrupt-store %q: use rebuild or fail", c.OnCorruptStore))
	}
	if c.NATS.Replicas < 1 || c.NATS.Replicas > 5 {
		errs = append(errs, fmt.Errorf("--replicas %d: use 1 to 5", c.NATS.Replicas))
	}
	if (c.NATS.TLSCert == "") != (c.NATS.TLSKey == "") {
		errs = append(errs, errors.New("--nats-tls-cert and --nats-tls-key go together"))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	switch c.LogFormat {
	case "auto", "json", "console":
	default:
		errs = append(errs, fmt.Errorf("--log-format %q: use json, console or auto", c.LogFormat))
	}
	if err := c.GroupConfig.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateEmbedded checks the settings of the embedded NATS server: the
// credentials it requires of its clients, and that it is not reachable from
// other hosts without them.
func (n nats) validateEmbedded() []error {
	host, _, err := net.SplitHostPort(n.EmbeddedListen)
	if err != nil {
		return []error{fmt.Errorf("--embedded-nats-listen %q: use host:port, e.g. 127.0.0.1:4222", n.EmbeddedListen)}
	}
	var errs []error
	if n.Creds != "" {
		errs = append(errs, errors.New("--nats-creds needs --nats: the embedded NATS server takes --nats-token, or --nats-user and --nats-password"))
	}
	if (n.User == "") != (n.Password == "") {
		errs = append(errs, errors.New("the embedded NATS server needs --nats-user and --nats-password together (or --nats-token alone)"))
	}
	if !natsembed.Loopback(host) && n.Token == "" && (n.User == "" || n.Password == "") {
		errs = append(errs, fmt.Errorf("--embedded-nats-listen %s is reachable from other hosts, and the embedded NATS server has no credentials: "+
			"anyone who reaches it could read, change or purge the group's changelog. Set --nats-token (or --nats-user and --nats-password), "+
			"which the agents that join it pass too, or listen on 127.0.0.1", n.EmbeddedListen))
	}
	return errs
}

// groupConfigFields lists the group settings that were given, as JSON names
// of assign.Config.
func (lc loadedConfig) groupConfigFields() []string {
	fields := []string{}
	for name := range lc.set {
		if f, ok := groupFields[name]; ok {
			fields = append(fields, f)
		}
	}
	sort.Strings(fields)
	return fields
}

// secretFlags are the settings whose values are secrets: printConfig masks
// them, and secrets masks them in errors and logs.
var secretFlags = map[string]bool{"api-token": true, "nats-password": true, "nats-token": true}

// secrets returns the secret values of n: its password, its token and the
// passwords or tokens in its URLs.
func (n nats) secrets() []string {
	return append([]string{n.Password, n.Token}, redact.URLSecrets(n.URL)...)
}

// redactor masks c's secrets (the API token and the NATS credentials) in
// errors and log lines.
func (c Config) redactor() *redact.Redactor {
	return redact.New(append(c.NATS.secrets(), c.APIToken)...)
}

// printConfig writes the resolved settings as a YAML config file would hold
// them; secrets are masked.
func (lc loadedConfig) printConfig(w io.Writer) error {
	doc := yaml.Node{Kind: yaml.MappingNode}
	var err error
	lc.fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || f.Name == "print-config" {
			return
		}
		v := f.Value.String()
		switch {
		case secretFlags[f.Name] && v != "":
			v = redact.Mask
		case f.Name == "nats":
			v = redact.URL(v)
		}
		// Tag each value with its flag's type, so that a string that looks
		// like a number or a boolean (member-id: "007") is quoted.
		tag := "!!str"
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case bool:
				tag = "!!bool"
			case int, uint64:
				tag = "!!int"
			}
		}
		doc.Content = append(doc.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Value: f.Name},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v})
	})
	if lc.ConfigFile != "" {
		fmt.Fprintf(w, "# resolved from %s, HANDOFF_* variables and flags\n", lc.ConfigFile)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err = enc.Encode(&doc); err != nil {
		return err
	}
	return enc.Close()
}

func agentUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: handoff agent [flags]

Runs the sidecar next to one worker: it joins the group, serves the worker's
HTTP API (see docs/api.md), keeps the member's local state, and hands tasks
over warmly. With no --nats URL it starts an embedded NATS server, so
  handoff agent --tasks 'orders-0..7' --member-id m1
is a complete one-member group; more local agents join it with
  --nats nats://127.0.0.1:4222 --member-id m2 --listen 127.0.0.1:7071 --data-dir data-m2

On SIGTERM or SIGINT the agent leaves the group gracefully (its tasks are
handed over, bounded by the leave timeout) and then exits; a second signal
exits at once.

Every flag can also be set as HANDOFF_<NAME> (e.g. HANDOFF_MEMBER_ID) or as a
key of the --config YAML file; flags win over the environment, which wins
over the file. The group settings (tasks through stable-max-wait) are stored
with the group when it is created; later members must agree with the ones
they set (see 'handoff group').

Flags:
`)
	fs.PrintDefaults()
}

// allowedHosts splits --api-allowed-hosts.
func (c Config) allowedHosts() []string {
	var out []string
	for _, h := range strings.Split(c.APIAllowedHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}
