package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"github.com/handoffhq/handoff/api"
	"github.com/handoffhq/handoff/internal/natstest"
)

// The parts of Kubernetes objects the tests read.
type (
	k8sObject struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Data      map[string]string `yaml:"data"`      // ConfigMap
		Resources []string          `yaml:"resources"` // Kustomization
		Spec      k8sSpec           `yaml:"spec"`
	}
	k8sSpec struct {
		ClusterIP string `yaml:"clusterIP"` // Service
		// Selector is a map of labels in a Service, a label selector with
		// matchLabels in a StatefulSet or a PodDisruptionBudget.
		Selector    yaml.Node `yaml:"selector"`
		ServiceName string    `yaml:"serviceName"`
		Template    struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	}
	k8sPodSpec struct {
		TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
		SecurityContext               struct {
			RunAsNonRoot bool `yaml:"runAsNonRoot"`
			RunAsUser    int  `yaml:"runAsUser"`
			FSGroup      int  `yaml:"fsGroup"`
		} `yaml:"securityContext"`
		InitContainers []k8sContainer `yaml:"initContainers"`
		Containers     []k8sContainer `yaml:"containers"`
		Volumes        []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
			EmptyDir *struct {
				Medium string `yaml:"medium"`
			} `yaml:"emptyDir"`
		} `yaml:"volumes"`
	}
	k8sContainer struct {
		Name          string   `yaml:"name"`
		Image         string   `yaml:"image"`
		Command       []string `yaml:"command"`
		RestartPolicy string   `yaml:"restartPolicy"`
		Ports         []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Env []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				FieldRef *struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		StartupProbe   *k8sHandler `yaml:"startupProbe"`
		LivenessProbe  *k8sHandler `yaml:"livenessProbe"`
		ReadinessProbe *k8sHandler `yaml:"readinessProbe"`
		Lifecycle      struct {
			PreStop *k8sHandler `yaml:"preStop"`
		} `yaml:"lifecycle"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	// k8sHandler is a probe or a lifecycle hook; only exec ones are used.
	k8sHandler struct {
		Exec *struct {
			Command []string `yaml:"command"`
		} `yaml:"exec"`
	}
)

// k8sManifests parses every YAML document of deploy/kubernetes.
func k8sManifests(t *testing.T) map[string][]k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes: %v", err)
	}
	byKind := map[string][]k8sObject{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var node yaml.Node
			if err := dec.Decode(&node); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			var o k8sObject
			if err := node.Decode(&o); err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			if o.APIVersion == "" || o.Kind == "" || (o.Metadata.Name == "" && o.Kind != "Kustomization") {
				t.Errorf("%s: document %d lacks apiVersion, kind or metadata.name", f, i)
			}
			byKind[o.Kind] = append(byKind[o.Kind], o)
		}
	}
	return byKind
}

// selector returns the labels o selects pods by.
func (o k8sObject) selector(t *testing.T) map[string]string {
	t.Helper()
	var labels map[string]string
	var err error
	if o.Kind == "Service" {
		err = o.Spec.Selector.Decode(&labels)
	} else {
		var sel struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
		err = o.Spec.Selector.Decode(&sel)
		labels = sel.MatchLabels
	}
	if err != nil {
		t.Fatalf("%s %s: selector: %v", o.Kind, o.Metadata.Name, err)
	}
	return labels
}

// only returns the one object of a kind.
func only(t *testing.T, objs map[string][]k8sObject, kind string) k8sObject {
	t.Helper()
	if len(objs[kind]) != 1 {
		t.Fatalf("deploy/kubernetes has %d %s objects, want 1", len(objs[kind]), kind)
	}
	return objs[kind][0]
}

func container(t *testing.T, cs []k8sContainer, name string) k8sContainer {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q in the StatefulSet", name)
	return k8sContainer{}
}

// podName is the member ID the tests give the pod's agent.
const podName = "orders-0"

// sidecarConfig resolves the sidecar's configuration as the pod would: its
// environment (the downward API giving podName), with the ConfigMap's file
// at the path HANDOFF_CONFIG names. It returns the config and the
// environment, HANDOFF_CONFIG pointing at a copy of the file.
func sidecarConfig(t *testing.T, objs map[string][]k8sObject) (Config, map[string]string) {
	t.Helper()
	sts, cm := only(t, objs, "StatefulSet"), only(t, objs, "ConfigMap")
	pod := sts.Spec.Template.Spec
	side := container(t, pod.InitContainers, "handoff")
	env := map[string]string{}
	for _, e := range side.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = podName
		case e.ValueFrom != nil:
			t.Fatalf("sidecar env %s: the test knows only fieldRef metadata.name", e.Name)
		default:
			env[e.Name] = e.Value
		}
	}
	path := env[envName("config")]
	if path == "" {
		t.Fatalf("the sidecar has no %s", envName("config"))
	}
	mountedFrom := ""
	for _, m := range side.VolumeMounts {
		if m.MountPath == filepath.Dir(path) {
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.ConfigMap != nil {
					mountedFrom = v.ConfigMap.Name
				}
			}
		}
	}
	if mountedFrom != cm.Metadata.Name {
		t.Fatalf("%s=%s is not in a volume of ConfigMap %s", envName("config"), path, cm.Metadata.Name)
	}
	file, ok := cm.Data[filepath.Base(path)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Metadata.Name, filepath.Base(path))
	}
	env[envName("config")] = writeTemp(t, file)
	lc, err := loadConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("the sidecar's configuration (ConfigMap %s and its env) does not load: %v", cm.Metadata.Name, err)
	}
	return lc.Config, env
}

// TestKubernetesManifests checks what docs/operations.md says of the
// example: a native sidecar probed on the address it listens on, a member
// ID from the pod's name, the data directory on a claim, a worker whose
// preStop hook leaves, and a grace period longer than a leave can take.
func TestKubernetesManifests(t *testing.T) {
	objs := k8sManifests(t)
	for _, kind := range []string{"StatefulSet", "Service", "ConfigMap", "PodDisruptionBudget", "Kustomization"} {
		only(t, objs, kind)
	}
	var files []string
	all, _ := filepath.Glob(filepath.Join(repoRoot, "deploy", "kubernetes", "*.yaml"))
	for _, f := range all {
		if filepath.Base(f) != "kustomization.yaml" {
			files = append(files, filepath.Base(f))
		}
	}
	if res := slices.Sorted(slices.Values(only(t, objs, "Kustomization").Resources)); !slices.Equal(res, files) {
		t.Errorf("kustomization.yaml lists %q, want every manifest: %q", res, files)
	}

	sts, svc, pdb := only(t, objs, "StatefulSet"), only(t, objs, "Service"), only(t, objs, "PodDisruptionBudget")
	pod := sts.Spec.Template.Spec
	labels := sts.Spec.Template.Metadata.Labels
	if svc.Spec.ClusterIP != "None" || svc.Metadata.Name != sts.Spec.ServiceName {
		t.Errorf("Service %s (clusterIP %q) is not the StatefulSet's headless service %q", svc.Metadata.Name, svc.Spec.ClusterIP, sts.Spec.ServiceName)
	}
	for what, sel := range map[string]map[string]string{
		"StatefulSet selector": sts.selector(t),
		"Service selector":     svc.selector(t),
		"PDB selector":         pdb.selector(t),
	} {
		if len(sel) == 0 {
			t.Errorf("%s is empty", what)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s %s=%s does not match the pod template's labels %v", what, k, v, labels)
			}
		}
	}

	cfg, env := sidecarConfig(t, objs)
	side := container(t, pod.InitContainers, "handoff")
	if side.RestartPolicy != "Always" {
		t.Errorf("init container handoff has restartPolicy %q, want Always (a native sidecar)", side.RestartPolicy)
	}
	if len(side.Command) > 0 {
		t.Errorf("the sidecar overrides the image's entrypoint with %q", side.Command)
	}
	var names []string
	for _, e := range side.Env {
		names = append(names, e.Name)
	}
	checkSettingNames(t, "sidecar env", names)
	if cfg.MemberID != podName {
		t.Errorf("the member ID is %q, want the pod's name from the downward API", cfg.MemberID)
	}
	if env[envName("member-id")] != podName {
		t.Errorf("%s is not the pod's name (fieldRef metadata.name)", envName("member-id"))
	}
	if cfg.NATS.URL == "" || cfg.NATS.Replicas < 3 {
		t.Errorf("the group uses NATS %q with %d replicas; the example runs on a NATS cluster with replicas 3", cfg.NATS.URL, cfg.NATS.Replicas)
	}

	df := parseDockerfile(t)
	img := checkDockerfile(t, df)
	claims := map[string]bool{}
	for _, c := range sts.Spec.VolumeClaimTemplates {
		claims[c.Metadata.Name] = true
	}
	onClaim := false
	for _, m := range side.VolumeMounts {
		if m.MountPath == cfg.DataDir && claims[m.Name] {
			onClaim = true
		}
	}
	if !onClaim {
		t.Errorf("the data directory %s is not on a volumeClaimTemplate", cfg.DataDir)
	}
	sc := pod.SecurityContext
	if !sc.RunAsNonRoot || sc.RunAsUser != img.uid || sc.FSGroup != img.gid {
		t.Errorf("pod securityContext %+v, want runAsNonRoot, runAsUser %d and fsGroup %d (the image's user, owner of the data volume)", sc, img.uid, img.gid)
	}

	// Probes: 'handoff health' on the address the agent listens on.
	health := []string{img.binary, "health", "--addr", cfg.Listen}
	for name, p := range map[string]struct {
		h    *k8sHandler
		want []string
	}{
		"startupProbe":   {side.StartupProbe, health},
		"livenessProbe":  {side.LivenessProbe, health},
		"readinessProbe": {side.ReadinessProbe, append(slices.Clone(health), "--ready")},
	} {
		if p.h == nil || p.h.Exec == nil {
			t.Errorf("sidecar %s: want exec %q", name, p.want)
			continue
		}
		if !slices.Equal(p.h.Exec.Command, p.want) {
			t.Errorf("sidecar %s runs %q, want %q", name, p.h.Exec.Command, p.want)
		}
	}

	// Prometheus scrapes the metrics listener: on the pod's IP, at the
	// port the sidecar declares and the pod's annotations name.
	_, port, err := net.SplitHostPort(cfg.MetricsListen)
	if err != nil {
		t.Errorf("the sidecar's metrics-listen %q: %v; the example serves its metrics apart from the API on the socket", cfg.MetricsListen, err)
	}
	declared := ""
	for _, p := range side.Ports {
		if p.Name == "metrics" {
			declared = fmt.Sprint(p.ContainerPort)
		}
	}
	ann := sts.Spec.Template.Metadata.Annotations
	if declared != port || ann["prometheus.io/port"] != port || ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("metrics-listen port %q, sidecar port named metrics %q, pod annotations %v: want one port, scraped at /metrics", port, declared, ann)
	}
	if host, _, _ := net.SplitHostPort(cfg.MetricsListen); host != "" {
		t.Errorf("metrics-listen %q listens on %s only; Prometheus reaches the pod's IP", cfg.MetricsListen, host)
	}

	// The worker leaves before it is stopped.
	worker := container(t, pod.Containers, "worker")
	script := preStopScript(t, worker)
	for _, s := range []string{"POST", "/leave", "/assignment?wait=", `"shutdown":true`} {
		if !strings.Contains(script, s) {
			t.Errorf("the worker's preStop hook does not contain %q:\n%s", s, script)
		}
	}
	sidecarURL := ""
	for _, e := range worker.Env {
		if e.Name == "SIDECAR_URL" {
			sidecarURL = e.Value
		}
	}
	if want := apiURL(cfg.Listen); sidecarURL != want {
		t.Errorf("worker SIDECAR_URL %q, want %q (the sidecar's listen address)", sidecarURL, want)
	}
	// A socket lives on a volume of the pod's own that both containers
	// mount at its directory; both run as the pod's user, who alone may
	// connect to it (mode 0600).
	if path, socket := api.SocketPath(cfg.Listen); socket {
		dir := filepath.Dir(path)
		mounted := func(c k8sContainer) string {
			for _, m := range c.VolumeMounts {
				if m.MountPath == dir {
					return m.Name
				}
			}
			return ""
		}
		vol := mounted(side)
		if vol == "" || mounted(worker) != vol {
			t.Errorf("the socket's directory %s is not one volume mounted by both the sidecar (%q) and the worker (%q)", dir, vol, mounted(worker))
		}
		shared := false
		for _, v := range pod.Volumes {
			shared = shared || v.Name == vol && v.EmptyDir != nil
		}
		if !shared {
			t.Errorf("volume %q of the socket is not an emptyDir of the pod's own", vol)
		}
		if sc.RunAsUser == 0 {
			t.Errorf("no pod-level runAsUser: the socket (mode 0600) needs the sidecar and the worker to run as one user")
		}
	}

	// The grace period covers the longest graceful leave.
	g := cfg.GroupConfig
	need := g.LeaveTimeout.D() + g.ReleaseTimeout.D() + 30*time.Second
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatalf("no terminationGracePeriodSeconds: the default 30s cuts a leave short")
	}
	if got := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; got < need {
		t.Errorf("terminationGracePeriodSeconds %s < leave-timeout %s + release-timeout %s + 30s", got, g.LeaveTimeout.D(), g.ReleaseTimeout.D())
	}
}

// preStopScript returns the shell script of the container's preStop hook.
func preStopScript(t *testing.T, c k8sContainer) string {
	t.Helper()
	h := c.Lifecycle.PreStop
	if h == nil || h.Exec == nil || len(h.Exec.Command) != 3 || h.Exec.Command[0] != "/bin/sh" || h.Exec.Command[1] != "-c" {
		t.Fatalf("container %s: want a preStop hook exec [/bin/sh -c SCRIPT]", c.Name)
	}
	return h.Exec.Command[2]
}

// runPreStop runs the hook's script against the agent at api with PATH set
// to path, as the kubelet would.
func runPreStop(t *testing.T, script, api, path string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), exitDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=" + path, "SIDECAR_URL=" + apiURL(api)}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("preStop hook: %w (context: %v)\n%s", err, ctx.Err(), out)
	}
	return nil
}

// shortTempDir is a temporary directory with a short path, removed when
// the test ends: a socket's path is at most 107 bytes, and t.TempDir's
// names the test.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// toolsOnly returns a directory holding links to the named programs only,
// for a PATH without the others.
func toolsOnly(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			t.Skipf("no %s here: %v", n, err)
		}
		if err := os.Symlink(p, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestKubernetesPreStop runs the worker's preStop hook, with curl and with
// wget only, against a real agent: it must return 0 once the agent says
// shutdown, and not before.
func TestKubernetesPreStop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent as a child process")
	}
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	script := preStopScript(t, container(t, only(t, k8sManifests(t), "StatefulSet").Spec.Template.Spec.Containers, "worker"))
	for _, tt := range []struct{ name, tool, listen string }{
		{"curl", "curl", "127.0.0.1:0"},
		{"wget", "wget", "127.0.0.1:0"},
		{"curl on a socket", "curl", "unix:" + filepath.Join(shortTempDir(t), "api.sock")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := toolsOnly(t, tt.tool, "sed")
			a := startAgent(t, "m1", nil, "--group", "prestop", "--member-id", "m1", "--data-dir", t.TempDir(),
				"--listen", tt.listen, "--embedded-nats-listen", "127.0.0.1:0", "--tasks", "orders-0..1")
			startWorker(t, a.api) // releases the tasks the leave revokes
			v := a.waitView(startDeadline, "state member", isMember)
			if v.Shutdown {
				t.Fatal("the agent says shutdown before any leave")
			}
			if err := runPreStop(t, script, a.api, path); err != nil {
				t.Fatal(err)
			}
			var st api.LeaveStatus
			a.getJSON("/leave", &st)
			if !st.Shutdown {
				t.Errorf("the preStop hook returned before the agent said shutdown: %+v", st)
			}
			a.signal(syscall.SIGTERM)
			if code := a.waitExit(exitDeadline); code != 0 {
				t.Errorf("exit status %d, want 0", code)
			}
		})
	}
}

// TestKubernetesPreStopProtocol runs the worker's preStop hook against a
// scripted API, with curl and with wget only: it must start the leave, then
// long-poll /assignment past the version it last saw until shutdown; and
// fail at once when the agent does not answer.
func TestKubernetesPreStopProtocol(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	script := preStopScript(t, container(t, only(t, k8sManifests(t), "StatefulSet").Spec.Template.Spec.Containers, "worker"))
	views := []string{
		`{"member":"m1","generation":4,"version":7,"state":"leaving","tasks":[{"id":"orders-1","role":"active","stateful":true,"epoch":2,"lag":0}],"revoke":[],"shutdown":false}`,
		`{"member":"m1","generation":5,"version":12,"state":"leaving","tasks":[],"revoke":["orders-1"],"shutdown":false}`,
		`{"member":"m1","generation":6,"version":13,"state":"done","tasks":[],"revoke":[],"shutdown":true}`,
	}
	want := []string{
		"POST /leave",
		"GET /assignment?wait=30s&after=0",
		"GET /assignment?wait=30s&after=7",
		"GET /assignment?wait=30s&after=12",
	}
	for _, tt := range []struct {
		name, tool string
		socket     bool
	}{{"curl", "curl", false}, {"wget", "wget", false}, {"curl on a socket", "curl", true}} {
		t.Run(tt.name, func(t *testing.T) {
			path := toolsOnly(t, tt.tool, "sed")
			var mu sync.Mutex
			var calls []string
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, r.Method+" "+r.URL.RequestURI())
				w.Header().Set("Content-Type", "application/json")
				switch n := len(calls); {
				case r.Method == http.MethodPost && r.URL.Path == "/leave":
					w.WriteHeader(http.StatusAccepted)
					w.Write([]byte(`{"state":"leaving","remaining":["orders-1"],"shutdown":false}` + "\n"))
				case r.Method == http.MethodGet && r.URL.Path == "/assignment" && n-2 < len(views):
					w.Write([]byte(views[n-2] + "\n"))
				default:
					w.WriteHeader(http.StatusBadRequest)
				}
			}))
			addr := ""
			if tt.socket {
				sock := filepath.Join(shortTempDir(t), "api.sock")
				ln, err := net.Listen("unix", sock)
				if err != nil {
					t.Fatal(err)
				}
				srv.Listener.Close()
				srv.Listener, addr = ln, "unix:"+sock
			}
			srv.Start()
			defer srv.Close()
			if addr == "" {
				addr = srv.Listener.Addr().String()
			}
			if err := runPreStop(t, script, addr, path); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(calls, want) {
				t.Errorf("the preStop hook called\n%q\nwant\n%q", calls, want)
			}

			gone := closedAddr(t)
			if tt.socket {
				gone = "unix:" + filepath.Join(shortTempDir(t), "gone.sock")
			}
			if err := runPreStop(t, script, gone, path); err == nil {
				t.Errorf("the preStop hook succeeded with no agent to call")
			}
		})
	}
}

// TestKubernetesTermination plays a scale-down of the example as the
// kubelet runs it: two members configured by the ConfigMap and the
// sidecar's environment, each with a worker; on orders-0, the worker's
// preStop hook, then SIGTERM to the sidecar. The hook must return once
// every task was handed over, the worker must be told to shut down,
// the sidecar must exit 0 and remove its member record, and orders-1 must
// own every task.
func TestKubernetesTermination(t *testing.T) {
	if testing.Short() {
		t.Skip("runs agents as child processes")
	}
	objs := k8sManifests(t)
	cfg, podEnv := sidecarConfig(t, objs)
	sts := only(t, objs, "StatefulSet")
	script := preStopScript(t, container(t, sts.Spec.Template.Spec.Containers, "worker"))
	side := container(t, sts.Spec.Template.Spec.InitContainers, "handoff")
	ns := natstest.Start(t)

	const tasks = 10
	start := func(member string) *agentProc {
		var e []string
		for k, v := range podEnv {
			switch k {
			case envName("member-id"):
				v = member
			case envName("data-dir"):
				v = t.TempDir()
			}
			e = append(e, k+"="+v)
		}
		// Flags win over the file: a local NATS, a socket in a directory
		// of the test's (as the ConfigMap's, in the pod's volume) or a
		// free port, fewer tasks.
		listen := "127.0.0.1:0"
		if _, socket := api.SocketPath(cfg.Listen); socket {
			listen = "unix:" + filepath.Join(shortTempDir(t), "api.sock")
		}
		return startAgent(t, member, e, "--nats", ns.URL, "--replicas", "1", "--listen", listen, "--metrics-listen", "127.0.0.1:0",
			"--tasks", fmt.Sprintf("orders-0..%d", tasks-3), "--stateless-tasks", "enrich-0..1")
	}
	m0 := start("orders-0")
	if _, socket := api.SocketPath(cfg.Listen); socket {
		if _, ok := api.SocketPath(m0.api); !ok {
			t.Fatalf("orders-0 serves its API on %s, want the Unix socket the ConfigMap's listen asks for", m0.api)
		}
	}
	w0 := startWorker(t, m0.api)
	m0.waitView(startDeadline, "every task", func(v api.View) bool { return len(v.Tasks) == tasks })
	m1 := start("orders-1")
	startWorker(t, m1.api)
	m1.waitView(startDeadline, "an active task", func(v api.View) bool { return activeCount(v) > 0 })

	// The probes, on the address the test agents listen on.
	for _, p := range []*k8sHandler{side.StartupProbe, side.LivenessProbe, side.ReadinessProbe} {
		if p == nil || p.Exec == nil || !slices.Contains(p.Exec.Command, "--addr") {
			t.Fatalf("a sidecar probe is not 'handoff health --addr ...' (see TestKubernetesManifests)")
		}
		args := slices.Clone(p.Exec.Command[1:])
		args[slices.Index(args, "--addr")+1] = m0.api
		var out bytes.Buffer
		if err := run(context.Background(), args, &env{stdout: &out, stderr: &out, getenv: func(string) string { return "" }}); err != nil {
			t.Errorf("probe %q on a running member: %v", args, err)
		}
	}

	// Prometheus scrapes the metrics listener without the API's token.
	started, _ := m0.find("agent started")
	metricsAddr, _ := started["metrics"].(string)
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("scrape orders-0's metrics listener: %v", err)
	}
	scrape, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(scrape), `handoff_tasks{role="active"}`) {
		t.Errorf("scrape of orders-0's metrics listener: status %d, want 200 with handoff_tasks:\n%.300s", resp.StatusCode, scrape)
	}

	if err := runPreStop(t, script, m0.api, os.Getenv("PATH")); err != nil {
		t.Fatal(err)
	}
	w0.waitShutdown(t)
	m0.signal(syscall.SIGTERM)
	if code := m0.waitExit(exitDeadline); code != 0 {
		t.Fatalf("orders-0 exit status %d, want 0", code)
	}
	if _, err := memberRecord(t, ns.URL, cfg.Group, "orders-0"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("orders-0's member record after exit: %v, want it deleted", err)
	}
	m1.waitView(exitDeadline, "every task active", func(v api.View) bool { return activeCount(v) == tasks })
	if !m0.logged("left the group") {
		t.Errorf("orders-0 did not log that it left the group")
	}
}
