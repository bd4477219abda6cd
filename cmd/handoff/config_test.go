package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/handoffhq/handoff/agent/assign"
	"github.com/handoffhq/handoff/internal/redact"
)

// configCase is one run of loadConfig: a config file (written to a temp
// file and named by HANDOFF_CONFIG unless args or env name one), HANDOFF_*
// variables and flags.
type configCase struct {
	file string
	env  map[string]string
	args []string
}

func (c configCase) load(t *testing.T) (loadedConfig, error) {
	t.Helper()
	env := map[string]string{}
	for k, v := range c.env {
		env[k] = v
	}
	if c.file != "" {
		path := filepath.Join(t.TempDir(), "handoff.yaml")
		if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, ok := env["HANDOFF_CONFIG"]; !ok {
			env["HANDOFF_CONFIG"] = path
		}
	}
	getenv := func(k string) string { return env[k] }
	return loadConfig(c.args, getenv, io.Discard)
}

// want builds the expected Config from the defaults.
func want(edit func(c *Config)) Config {
	c := DefaultConfig()
	edit(&c)
	if c.Advertise == "" {
		c.Advertise = c.Listen
	}
	return c
}

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		name string
		in   configCase
		want Config // ConfigFile is not compared
		set  []string
	}{
		{
			name: "defaults",
			want: want(func(c *Config) {}),
			set:  []string{},
		},
		{
			name: "file only",
			in: configCase{file: `
group: orders
member-id: orders-0
listen: 0.0.0.0:7071
data-dir: /var/lib/handoff
zone: eu-west-1a
capacity: 2
nats: [nats://n1:4222, nats://n2:4222]
nats-sync-always: true
replicas: 3
tasks:
  - orders-0..63
  - payments-0..7
stateless-tasks: enrich-0..3
handover: stable
acceptable-lag: 500
max-learners: 8
max-learners-per-member: 2
standbys: 1
session-timeout: 10s
leave-timeout: 90s
release-timeout: 5s
stable-max-wait: 1m
log-level: debug
log-format: json
nats-tls-cert: /tls/client.pem
nats-tls-key: /tls/client-key.pem
`},
			want: want(func(c *Config) {
				c.Group, c.MemberID, c.Listen, c.DataDir, c.Zone, c.Capacity = "orders", "orders-0", "0.0.0.0:7071", "/var/lib/handoff", "eu-west-1a", 2
				c.NATS.URL, c.NATS.SyncAlways, c.NATS.Replicas = "nats://n1:4222,nats://n2:4222", true, 3
				g := &c.GroupConfig
				g.Stateful, g.Stateless = []string{"orders-0..63,payments-0..7"}, []string{"enrich-0..3"}
				g.Handover, g.AcceptableLag, g.MaxLearners, g.MaxLearnersPerMember, g.Standbys = assign.Stable, 500, 8, 2, 1
				g.SessionTimeout = assign.Duration(10 * time.Second)
				g.LeaveTimeout = assign.Duration(90 * time.Second)
				g.ReleaseTimeout = assign.Duration(5 * time.Second)
				g.StableMaxWait = assign.Duration(time.Minute)
				c.LogLevel, c.LogFormat = "debug", "json"
				c.NATS.TLSCert, c.NATS.TLSKey = "/tls/client.pem", "/tls/client-key.pem"
			}),
			set: []string{"acceptable-lag", "capacity", "data-dir", "group", "handover", "leave-timeout", "listen",
				"log-format", "log-level", "max-learners", "max-learners-per-member", "member-id", "nats",
				"nats-sync-always", "nats-tls-cert", "nats-tls-key", "release-timeout", "replicas", "session-timeout", "stable-max-wait",
				"standbys", "stateless-tasks", "tasks", "zone"},
		},
		{
			name: "environment over file",
			in: configCase{
				file: "group: from-file\nzone: a\ncapacity: 2\n",
				env:  map[string]string{"HANDOFF_GROUP": "from-env", "HANDOFF_MAX_LEARNERS_PER_MEMBER": "9"},
			},
			want: want(func(c *Config) {
				c.Group, c.Zone, c.Capacity = "from-env", "a", 2
				c.GroupConfig.MaxLearnersPerMember = 9
			}),
			set: []string{"capacity", "group", "max-learners-per-member", "zone"},
		},
		{
			name: "flag over environment over file",
			in: configCase{
				file: "group: from-file\nhandover: eager\nleave-timeout: 1m\n",
				env:  map[string]string{"HANDOFF_GROUP": "from-env", "HANDOFF_HANDOVER": "stable"},
				args: []string{"--group", "from-flag", "--leave-timeout=2m"},
			},
			want: want(func(c *Config) {
				c.Group = "from-flag"
				c.GroupConfig.Handover = assign.Stable
				c.GroupConfig.LeaveTimeout = assign.Duration(2 * time.Minute)
			}),
			set: []string{"group", "handover", "leave-timeout"},
		},
		{
			name: "agent with no worker",
			in:   configCase{env: map[string]string{"HANDOFF_REQUIRE_WORKER": "false", "HANDOFF_WORKER_TIMEOUT": "1s"}},
			want: want(func(c *Config) { c.RequireWorker, c.WorkerTimeout = false, time.Second }),
			set:  []string{"require-worker", "worker-timeout"},
		},
		{
			name: "flag over file",
			in:   configCase{file: "capacity: 3\nnats-sync-always: true\n", args: []string{"--capacity", "4", "--nats-sync-always=false"}},
			want: want(func(c *Config) { c.Capacity = 4 }),
			set:  []string{"capacity", "nats-sync-always"},
		},
		{
			name: "an empty variable does not override the file",
			in:   configCase{file: "zone: a\n", env: map[string]string{"HANDOFF_ZONE": ""}},
			want: want(func(c *Config) { c.Zone = "a" }),
			set:  []string{"zone"},
		},
		{
			name: "a flag given as empty overrides the file",
			in:   configCase{file: "zone: a\ntasks: x-0..3\n", args: []string{"--zone=", "--tasks="}},
			want: want(func(c *Config) {}),
			set:  []string{"tasks", "zone"},
		},
		{
			name: "--config wins over HANDOFF_CONFIG",
			in:   configCase{env: map[string]string{"HANDOFF_CONFIG": "/nonexistent/handoff.yaml"}, args: []string{"--config", writeTemp(t, "group: named-by-flag\n")}},
			want: want(func(c *Config) { c.Group = "named-by-flag" }),
			set:  []string{"config", "group"},
		},
		{
			name: "scalars are taken as written",
			in:   configCase{file: "member-id: 007\napi-token: 0123\nzone: 2025-01-01\ngroup: 1e3\nnats-user: 0x1F\nnats-password: yes\n"},
			want: want(func(c *Config) {
				c.MemberID, c.APIToken, c.Zone, c.Group, c.NATS.User, c.NATS.Password = "007", "0123", "2025-01-01", "1e3", "0x1F", "yes"
			}),
			set: []string{"api-token", "group", "member-id", "nats-password", "nats-user", "zone"},
		},
		{
			name: "null and empty list are empty",
			in:   configCase{file: "zone: ~\nadvertise:\ntasks: []\nstateless-tasks: [a, ~, b]\n"},
			want: want(func(c *Config) { c.GroupConfig.Stateless = []string{"a,,b"} }),
			set:  []string{"advertise", "stateless-tasks", "tasks", "zone"},
		},
		{
			name: "aliases",
			in:   configCase{file: "group: &name orders\nmember-id: *name\ntasks: &ts [a, b]\nstateless-tasks: [c]\n"},
			want: want(func(c *Config) {
				c.Group, c.MemberID = "orders", "orders"
				c.GroupConfig.Stateful, c.GroupConfig.Stateless = []string{"a,b"}, []string{"c"}
			}),
			set: []string{"group", "member-id", "stateless-tasks", "tasks"},
		},
		{
			name: "empty file",
			in:   configCase{file: "# nothing yet\n"},
			want: want(func(c *Config) {}),
			set:  []string{},
		},
		{
			name: "a Unix socket",
			in:   configCase{args: []string{"--listen", "unix:/run/handoff/api.sock", "--api-socket-group", "workers"}},
			want: want(func(c *Config) {
				c.Listen, c.Advertise, c.APISocketGroup = "unix:/run/handoff/api.sock", "unix:/run/handoff/api.sock", "workers"
			}),
			set: []string{"api-socket-group", "listen"},
		},
		{
			name: "advertise defaults to listen",
			in:   configCase{args: []string{"--listen", "127.0.0.1:7171"}},
			want: want(func(c *Config) { c.Listen = "127.0.0.1:7171" }),
			set:  []string{"listen"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lc, err := tt.in.load(t)
			if err != nil {
				t.Fatalf("loadConfig(%+v) error: %v", tt.in, err)
			}
			got := lc.Config
			got.ConfigFile = ""
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("loadConfig(%+v) =\n%+v\nwant\n%+v", tt.in, got, tt.want)
			}
			var set []string
			for k := range lc.set {
				set = append(set, k)
			}
			slices.Sort(set)
			if !slices.Equal(set, tt.set) {
				t.Errorf("loadConfig(%+v) set %q, want %q", tt.in, set, tt.set)
			}
		})
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "handoff.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		in   configCase
		want []string // substrings of the error
	}{
		{"unknown key", configCase{file: "group: a\nmembr-id: x\n"}, []string{`line 2: unknown key "membr-id"`, "flags without dashes"}},
		{"dashes in a key", configCase{file: "--group: a\n"}, []string{`unknown key "--group"`}},
		{"config in the file", configCase{file: "config: other.yaml\n"}, []string{`unknown key "config"`}},
		{"print-config in the file", configCase{file: "print-config: true\n"}, []string{`unknown key "print-config"`}},
		{"repeated key", configCase{file: "group: a\ngroup: b\n"}, []string{`line 2: key "group" is set twice`}},
		{"not a mapping", configCase{file: "- group: a\n"}, []string{"want a mapping of setting names"}},
		{"not YAML", configCase{file: "group: [a\n"}, []string{"config file"}},
		{"nested mapping", configCase{file: "nats:\n  url: nats://x\n"}, []string{`key "nats"`, "a value must be a string, number, boolean or list"}},
		{"list of lists", configCase{file: "tasks: [[a]]\n"}, []string{`key "tasks"`, "a list holds plain values"}},
		{"missing file", configCase{args: []string{"--config", "/nonexistent/handoff.yaml"}}, []string{"read config file", "/nonexistent/handoff.yaml"}},
		{"file: not a number", configCase{file: "capacity: two\n"}, []string{`key "capacity": invalid value "two"`}},
		{"file: not a boolean", configCase{file: "nats-sync-always: maybe\n"}, []string{`key "nats-sync-always": invalid value "maybe"`}},
		{"file: duration without unit", configCase{file: "leave-timeout: 30\n"}, []string{`key "leave-timeout": invalid value "30"`, "missing unit"}},
		{"file: bad mode", configCase{file: "handover: fast\n"}, []string{`key "handover"`, "use eager or stable"}},
		{"file: bad range", configCase{file: "tasks: [orders-9..1]\n"}, []string{`key "tasks"`, "prefix-FIRST..LAST"}},
		{"env: not a number", configCase{env: map[string]string{"HANDOFF_CAPACITY": "two"}}, []string{`HANDOFF_CAPACITY="two"`}},
		{"env: bad task ID", configCase{env: map[string]string{"HANDOFF_TASKS": "orders 1"}}, []string{`HANDOFF_TASKS="orders 1"`, "task ID"}},
		{"env: every bad variable", configCase{env: map[string]string{"HANDOFF_CAPACITY": "x", "HANDOFF_STANDBYS": "y"}}, []string{"HANDOFF_CAPACITY", "HANDOFF_STANDBYS"}},
		{"flag: not a number", configCase{args: []string{"--replicas", "three"}}, []string{`invalid value "three" for flag -replicas`}},
		{"flag: unknown", configCase{args: []string{"--membr-id", "x"}}, []string{"flag provided but not defined: -membr-id"}},
		{"positional argument", configCase{args: []string{"orders"}}, []string{`unexpected argument "orders"`}},
		{"invalid group", configCase{file: "group: a b\n"}, []string{`--group "a b"`}},
		{"invalid member ID", configCase{env: map[string]string{"HANDOFF_MEMBER_ID": "orders.0"}}, []string{`--member-id "orders.0"`}},
		{"capacity 0", configCase{args: []string{"--capacity=0"}}, []string{"--capacity 0: use 1 or more"}},
		{"worker timeout within the grace", configCase{args: []string{"--worker-timeout=1s"}}, []string{"--worker-timeout 1s: use more than the 1s"}},
		{"too many replicas", configCase{file: "replicas: 7\n"}, []string{"--replicas 7: use 1 to 5"}},
		{"listen without port", configCase{file: "listen: localhost\n"}, []string{`--listen "localhost"`, "or unix:PATH"}},
		{"socket path empty", configCase{args: []string{"--listen", "unix:"}}, []string{`--listen "unix:"`, "the socket path is empty"}},
		{"socket path too long", configCase{args: []string{"--listen", "unix:/" + strings.Repeat("s", 120)}}, []string{"a Unix socket path is at most 107"}},
		{"socket group without a socket", configCase{args: []string{"--api-socket-group", "workers"}}, []string{"--api-socket-group \"workers\" goes with --listen unix:PATH"}},
		{"embedded listen without port", configCase{file: "embedded-nats-listen: localhost\n"}, []string{`--embedded-nats-listen "localhost"`}},
		{"open embedded NATS", configCase{args: []string{"--embedded-nats-listen", "0.0.0.0:4222"}},
			[]string{"--embedded-nats-listen 0.0.0.0:4222 is reachable from other hosts", "Set --nats-token (or --nats-user and --nats-password)", "or listen on 127.0.0.1"}},
		{"embedded NATS on all interfaces", configCase{env: map[string]string{"HANDOFF_EMBEDDED_NATS_LISTEN": ":4222"}}, []string{"reachable from other hosts"}},
		{"embedded NATS on a name", configCase{file: "embedded-nats-listen: nats.example.com:4222\n"}, []string{"reachable from other hosts"}},
		{"embedded NATS user without password", configCase{args: []string{"--nats-user", "bob"}}, []string{"--nats-user and --nats-password together"}},
		{"embedded NATS with a creds file", configCase{args: []string{"--nats-creds", "/c.creds"}}, []string{"--nats-creds needs --nats"}},
		{"token and user", configCase{args: []string{"--nats", "nats://n:4222", "--nats-token", "t", "--nats-user", "u"}}, []string{"--nats-token goes alone"}},
		{"API body timeout 0", configCase{args: []string{"--api-body-timeout", "0s"}}, []string{"--api-body-timeout 0s: use positive durations"}},
		{"API without connections", configCase{env: map[string]string{"HANDOFF_API_MAX_CONNS": "-1"}}, []string{"--api-max-conns -1: use more than --api-max-requests plus --api-max-long-polls (320)"}},
		{"API connections no more than its requests", configCase{args: []string{"--api-max-conns", "64", "--api-max-requests", "60"}}, []string{"--api-max-conns 64: use more than"}},
		{"API without requests", configCase{args: []string{"--api-max-requests", "0"}}, []string{"--api-max-requests 0, --api-max-long-polls 64: use 1 or more"}},
		{"store cache 0", configCase{args: []string{"--store-cache-mb", "0"}}, []string{"--store-cache-mb 0: use 1 or more"}},
		{"record cache below 0", configCase{args: []string{"--store-record-cache-mb", "-1"}}, []string{"--store-record-cache-mb -1: use 0 (no record cache) or more"}},
		{"TLS cert without key", configCase{file: "nats-tls-cert: c.pem\n"}, []string{"--nats-tls-cert and --nats-tls-key go together"}},
		{"log level", configCase{file: "log-level: loud\n"}, []string{`--log-level "loud"`}},
		{"log format", configCase{file: "log-format: xml\n"}, []string{`--log-format "xml"`}},
		{"short session timeout", configCase{file: "session-timeout: 1s\n"}, []string{"session timeout 1s"}},
		{"task twice", configCase{file: "tasks: [a]\nstateless-tasks: [a]\n"}, []string{`task "a" is listed twice`}},
		{"negative store reserve", configCase{file: "store-min-free-mb: -1\n"}, []string{"--store-min-free-mb -1"}},
		{"corrupt store policy", configCase{file: "on-corrupt-store: ignore\n"}, []string{`--on-corrupt-store "ignore": use rebuild or fail`}},
		{"every problem at once", configCase{file: "capacity: 0\nreplicas: 0\nlog-format: xml\n"}, []string{"--capacity", "--replicas", "--log-format"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.in.load(t)
			if err == nil {
				t.Fatalf("loadConfig(%+v) = nil error, want one containing %q", tt.in, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("loadConfig(%+v) error = %q, want it to contain %q", tt.in, err, w)
				}
			}
		})
	}
}

// TestEverySettingHasOneName sets every setting, one at a time, as a flag,
// as a variable and as a file key, and checks that each route gives the
// same configuration.
func TestEverySettingHasOneName(t *testing.T) {
	values := map[string]string{
		"acceptable-lag": "7", "advertise": "10.0.0.1:7070", "api-token": "t0k3n",
		"api-allowed-hosts": "agent.internal", "api-read-header-timeout": "3s", "api-body-timeout": "4s", "api-max-conns": "640", "api-max-requests": "100", "api-max-long-polls": "8", "capacity": "3",
		"data-dir": "/data", "embedded-nats-listen": "127.0.0.1:4333", "group": "g1", "handover": "stable",
		"leave-timeout": "42s", "listen": "127.0.0.1:7171", "log-format": "json", "log-level": "warn",
		"max-learners": "5", "max-learners-per-member": "6", "member-id": "m-9", "nats": "nats://n:4222",
		"nats-creds": "/c.creds", "nats-password": "pw", "nats-token": "tok", "nats-sync-always": "true", "nats-tls-ca": "/ca.pem",
		"nats-user": "u", "release-timeout": "3s", "replicas": "3", "session-timeout": "9s",
		"stable-max-wait": "50s", "standbys": "2", "stateless-tasks": "s-0..1", "tasks": "t-0..3", "zone": "z",
		"snapshot-every": "500", "snapshot-interval": "5m0s", "snapshot-keep": "3", "snapshot-margin": "77", "snapshots": "false",
		"require-worker": "false", "worker-timeout": "12s", "api-socket-group": "65532", "store-cache-mb": "64", "store-record-cache-mb": "32",
		"store-min-free-mb": "256", "on-corrupt-store": "fail", "accept-state-loss": "t-1..2", "metrics-listen": "127.0.0.1:9191",
		"nats-tls-cert": "", "nats-tls-key": "", // go together: set below
		"config": "", "print-config": "", // not settings of the file
	}
	// Settings that are valid only with another one, given as a flag to
	// every route: the embedded NATS server takes no creds file, and a
	// user and a password together.
	with := map[string][]string{
		"api-socket-group": {"--listen=unix:/run/handoff/api.sock"},
		"nats-creds":       {"--nats=nats://n:4222"}, "nats-user": {"--nats=nats://n:4222"}, "nats-password": {"--nats=nats://n:4222"},
	}
	var probe Config
	agentFlags(&probe).VisitAll(func(f *flag.Flag) {
		v, ok := values[f.Name]
		if !ok {
			t.Errorf("flag --%s has no test value: add one to this test", f.Name)
			return
		}
		if v == "" {
			return
		}
		t.Run(f.Name, func(t *testing.T) {
			byFlag, err := configCase{args: append([]string{"--" + f.Name + "=" + v}, with[f.Name]...)}.load(t)
			if err != nil {
				t.Fatalf("--%s=%s: %v", f.Name, v, err)
			}
			byEnv, err := configCase{env: map[string]string{envName(f.Name): v}, args: with[f.Name]}.load(t)
			if err != nil {
				t.Fatalf("%s=%s: %v", envName(f.Name), v, err)
			}
			node := yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
				{Kind: yaml.ScalarNode, Value: f.Name}, {Kind: yaml.ScalarNode, Value: v, Style: yaml.DoubleQuotedStyle}}}
			file, err := yaml.Marshal(&node)
			if err != nil {
				t.Fatal(err)
			}
			byFile, err := configCase{file: string(file), args: with[f.Name]}.load(t)
			if err != nil {
				t.Fatalf("file %q: %v", file, err)
			}
			byFile.ConfigFile = ""
			if reflect.DeepEqual(byFlag.Config, want(func(*Config) {})) {
				t.Errorf("--%s=%s changed nothing", f.Name, v)
			}
			if !reflect.DeepEqual(byFlag.Config, byEnv.Config) || !reflect.DeepEqual(byFlag.Config, byFile.Config) {
				t.Errorf("--%s=%s, %s=%s and file key %s: %s differ:\n%+v\n%+v\n%+v",
					f.Name, v, envName(f.Name), v, f.Name, v, byFlag.Config, byEnv.Config, byFile.Config)
			}
		})
	})
}

func TestPrintConfig(t *testing.T) {
	in := configCase{
		file: "group: orders\napi-token: file-secret\nmember-id: \"007\"\ntasks: [orders-0..7, billing-0..1]\nnats-sync-always: true\n",
		env: map[string]string{"HANDOFF_NATS_PASSWORD": "env-secret", "HANDOFF_NATS_USER": "alice",
			"HANDOFF_NATS": "nats://alice:url-secret@n:4222,nats://url-token@n2:4222"},
		args: []string{"--capacity", "2", "--leave-timeout", "90s"},
	}
	lc, err := in.load(t)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := lc.printConfig(&out); err != nil {
		t.Fatal(err)
	}
	printed := out.String()
	for _, secret := range []string{"file-secret", "env-secret", "url-secret", "url-token"} {
		if strings.Contains(printed, secret) {
			t.Errorf("printConfig shows the secret %q:\n%s", secret, printed)
		}
	}
	if !strings.HasPrefix(printed, "# resolved from "+lc.ConfigFile) {
		t.Errorf("printConfig does not start by naming the file %s:\n%s", lc.ConfigFile, printed)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("printConfig wrote invalid YAML: %v\n%s", err, printed)
	}
	for key, want := range map[string]any{
		"api-token": redact.Mask, "nats-password": redact.Mask, "member-id": "007", "capacity": 2,
		"nats":             "nats://alice:xxxxx@n:4222,nats://xxxxx@n2:4222",
		"nats-sync-always": true, "leave-timeout": "1m30s", "tasks": "orders-0..7,billing-0..1", "zone": "",
	} {
		if doc[key] != want {
			t.Errorf("printConfig: %s: %#v, want %#v", key, doc[key], want)
		}
	}

	// The output is a config file that gives the same configuration, but
	// for the masked secrets.
	delete(doc, "api-token")
	delete(doc, "nats-password")
	again, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	lc2, err := configCase{file: string(again)}.load(t)
	if err != nil {
		t.Fatalf("load the printed config: %v\n%s", err, again)
	}
	got, wantCfg := lc2.Config, lc.Config
	got.ConfigFile, wantCfg.ConfigFile = "", ""
	wantCfg.APIToken, wantCfg.NATS.Password = "", ""
	wantCfg.NATS.URL = "nats://alice:xxxxx@n:4222,nats://xxxxx@n2:4222"
	if !reflect.DeepEqual(got, wantCfg) {
		t.Errorf("printed config loads as\n%+v\nwant\n%+v", got, wantCfg)
	}
}

func TestAgentPrintConfigStartsNothing(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	var out, errOut bytes.Buffer
	e := &env{stdout: &out, stderr: &errOut, getenv: func(k string) string {
		return map[string]string{"HANDOFF_ZONE": "z1"}[k]
	}}
	err := run(context.Background(), []string{"agent", "--print-config", "--group", "orders", "--data-dir", dataDir}, e)
	if err != nil {
		t.Fatalf("handoff agent --print-config: %v", err)
	}
	for _, line := range []string{"group: orders", "zone: z1", "data-dir: " + dataDir} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("handoff agent --print-config printed\n%s\nwant a line %q", out.String(), line)
		}
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--print-config touched the data directory: %v", err)
	}
}

func TestAgentHelp(t *testing.T) {
	var out bytes.Buffer
	e := &env{stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
	err := run(context.Background(), []string{"agent", "--help"}, e)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("handoff agent --help: %v, want flag.ErrHelp (main exits 0 on it)", err)
	}
	for _, s := range []string{"HANDOFF_<NAME>", "--config", "second signal", "-member-id"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("handoff agent --help does not mention %q:\n%s", s, out.String())
		}
	}
}

func TestGroupConfigFields(t *testing.T) {
	tests := []struct {
		name string
		in   configCase
		want []string
	}{
		{"none", configCase{file: "group: g\nlisten: 127.0.0.1:7171\n"}, []string{}},
		{"from file, env and flags", configCase{
			file: "group: g\ntasks: [a-0..3]\n",
			env:  map[string]string{"HANDOFF_HANDOVER": "stable", "HANDOFF_ZONE": "z"},
			args: []string{"--standbys", "1", "--capacity", "2"},
		}, []string{"handover", "standbys", "stateful"}},
		{"every group setting", configCase{args: []string{
			"--tasks", "a", "--stateless-tasks", "b", "--handover", "eager", "--acceptable-lag", "1",
			"--max-learners", "1", "--max-learners-per-member", "1", "--standbys", "0",
			"--session-timeout", "6s", "--leave-timeout", "1m", "--release-timeout", "1s", "--stable-max-wait", "1m",
		}}, []string{"acceptableLag", "handover", "leaveTimeout", "maxLearners", "maxLearnersPerMember",
			"releaseTimeout", "sessionTimeout", "stableMaxWait", "standbys", "stateful", "stateless"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lc, err := tt.in.load(t)
			if err != nil {
				t.Fatal(err)
			}
			if got := lc.groupConfigFields(); !slices.Equal(got, tt.want) {
				t.Errorf("groupConfigFields() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestGroupFieldsMatchConfig keeps groupFields in step with the flags and
// with assign.Config's JSON names, which agent.EnsureConfig compares by.
func TestGroupFieldsMatchConfig(t *testing.T) {
	jsonNames := map[string]bool{}
	ct := reflect.TypeOf(assign.Config{})
	for i := 0; i < ct.NumField(); i++ {
		name, _, _ := strings.Cut(ct.Field(i).Tag.Get("json"), ",")
		jsonNames[name] = true
	}
	var c Config
	fs := agentFlags(&c)
	mapped := map[string]bool{}
	for flagName, field := range groupFields {
		if fs.Lookup(flagName) == nil {
			t.Errorf("groupFields maps --%s, which is no flag", flagName)
		}
		if !jsonNames[field] {
			t.Errorf("groupFields maps --%s to %q, which is no JSON field of assign.Config", flagName, field)
		}
		mapped[field] = true
	}
	for name := range jsonNames {
		if !mapped[name] {
			t.Errorf("assign.Config's %q is set by no flag in groupFields", name)
		}
	}
}
