package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The repository's root, seen from this package's directory.
var repoRoot = filepath.Join("..", "..")

// dockerInstr is one instruction of a Dockerfile, continuation lines joined.
type dockerInstr struct {
	cmd  string // upper case: RUN, COPY, ...
	args string
}

type dockerStage struct {
	image, name string
	instrs      []dockerInstr
}

// dockerfile is what the tests read of the Dockerfile: the ARGs before the
// first FROM and the stages.
type dockerfile struct {
	args   map[string]string
	stages []dockerStage
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := dockerfile{args: map[string]string{}}
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue // comments may sit inside a continuation, too
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		full := cur.String()
		cur.Reset()
		cmd, rest, _ := strings.Cut(full, " ")
		in := dockerInstr{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(rest)}
		switch {
		case in.cmd == "ARG" && len(df.stages) == 0:
			k, v, _ := strings.Cut(in.args, "=")
			df.args[k] = v
		case in.cmd == "FROM":
			f := strings.Fields(os.Expand(in.args, func(k string) string { return df.args[k] }))
			st := dockerStage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			df.stages = append(df.stages, st)
		case len(df.stages) == 0:
			t.Fatalf("Dockerfile: %s before the first FROM", in.cmd)
		default:
			st := &df.stages[len(df.stages)-1]
			st.instrs = append(st.instrs, in)
		}
	}
	if len(df.stages) == 0 {
		t.Fatal("Dockerfile has no FROM")
	}
	return df
}

// all returns the arguments of every instruction cmd of the stage.
func (s dockerStage) all(cmd string) []string {
	var out []string
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// one returns the arguments of the stage's only instruction cmd.
func (s dockerStage) one(t *testing.T, cmd string) string {
	t.Helper()
	all := s.all(cmd)
	if len(all) != 1 {
		t.Fatalf("Dockerfile: the %s stage has %d %s instructions, want 1", s.image, len(all), cmd)
	}
	return all[0]
}

// jsonArgs decodes an exec-form argument list, such as ["/handoff", "agent"].
func jsonArgs(t *testing.T, what, s string) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("Dockerfile: %s %s is not in exec form (a JSON list): %v", what, s, err)
	}
	return out
}

// goBuildLine is the go build command of the build stage, without its
// cache mounts.
var goBuildLine = regexp.MustCompile(`CGO_ENABLED=0 go build .* -o (\S+) \./cmd/handoff$`)

// dockerImage is what the runtime image is made of, as the Dockerfile says.
type dockerImage struct {
	binary   string   // path of the handoff binary
	uid, gid int      // USER
	env      []string // ENV, as NAME=VALUE
	dataDir  string   // HANDOFF_DATA_DIR, a VOLUME
}

// TestDockerfile checks the Dockerfile's promises: a golang builder of
// go.mod's version building a static binary, a distroless runtime that runs
// 'handoff agent' as a non-root user with the data directory on a volume
// owned by that user, and a health check that needs no shell.
func TestDockerfile(t *testing.T) {
	checkDockerfile(t, parseDockerfile(t))
}

func checkDockerfile(t *testing.T, df dockerfile) dockerImage {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if goVersion == nil {
		t.Fatal("go.mod has no go directive")
	}
	if len(df.stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a builder and a runtime", len(df.stages))
	}
	build, final := df.stages[0], df.stages[len(df.stages)-1]
	if want := "golang:" + string(goVersion[1]); build.image != want {
		t.Errorf("Dockerfile: builder FROM %s, want %s (go.mod's version)", build.image, want)
	}
	var out string
	for _, run := range build.all("RUN") {
		if m := goBuildLine.FindStringSubmatch(run); m != nil {
			out = m[1]
		}
	}
	if out == "" {
		t.Fatalf("Dockerfile: the builder has no RUN matching %s", goBuildLine)
	}

	if !strings.HasPrefix(final.image, "gcr.io/distroless/static") {
		t.Errorf("Dockerfile: runtime FROM %s, want a distroless static image", final.image)
	}
	var img dockerImage
	user := final.one(t, "USER")
	u, g, _ := strings.Cut(user, ":")
	if img.uid, err = strconv.Atoi(u); err != nil || img.uid == 0 {
		t.Errorf("Dockerfile: USER %s, want a numeric non-root user (Kubernetes' runAsNonRoot can only verify numbers)", user)
	}
	img.gid, _ = strconv.Atoi(g)

	entry := jsonArgs(t, "ENTRYPOINT", final.one(t, "ENTRYPOINT"))
	if len(entry) != 2 || entry[1] != "agent" {
		t.Fatalf("Dockerfile: ENTRYPOINT %q, want [<binary> agent]", entry)
	}
	img.binary = entry[0]
	copied := false
	for _, c := range final.all("COPY") {
		f := strings.Fields(c)
		if slices.Contains(f, "--from="+build.name) && f[len(f)-2] == out && f[len(f)-1] == img.binary {
			copied = true
		}
	}
	if !copied {
		t.Errorf("Dockerfile: no COPY --from=%s %s %s in the runtime stage", build.name, out, img.binary)
	}

	for _, e := range final.all("ENV") {
		img.env = append(img.env, strings.Fields(e)...)
	}
	checkSettingNames(t, "Dockerfile ENV", img.env)
	for _, kv := range img.env {
		if v, ok := strings.CutPrefix(kv, envName("data-dir")+"="); ok {
			img.dataDir = v
		}
	}
	if img.dataDir == "" {
		t.Fatalf("Dockerfile: no ENV %s", envName("data-dir"))
	}
	if vol := jsonArgs(t, "VOLUME", final.one(t, "VOLUME")); !slices.Contains(vol, img.dataDir) {
		t.Errorf("Dockerfile: VOLUME %q, want the data directory %s", vol, img.dataDir)
	}
	owned := false
	for _, c := range final.all("COPY") {
		f := strings.Fields(c)
		if slices.Contains(f, "--chown="+user) && f[len(f)-1] == img.dataDir {
			owned = true
		}
	}
	if !owned {
		t.Errorf("Dockerfile: no COPY --chown=%s ... %s: a new volume there would belong to root, and the agent could not write", user, img.dataDir)
	}

	hc := final.one(t, "HEALTHCHECK")
	_, cmd, ok := strings.Cut(hc, " CMD ")
	if !ok {
		t.Fatalf("Dockerfile: HEALTHCHECK %s has no CMD", hc)
	}
	if got := jsonArgs(t, "HEALTHCHECK CMD", cmd); !slices.Equal(got, []string{img.binary, "health"}) {
		t.Errorf("Dockerfile: HEALTHCHECK CMD %q, want [%s health] (no shell or curl in the image)", got, img.binary)
	}
	for _, c := range []string{"agent", "health"} {
		if _, ok := commands[c]; !ok {
			t.Errorf("Dockerfile runs 'handoff %s', which is no command", c)
		}
	}
	return img
}

// checkSettingNames fails for every HANDOFF_* variable in env (NAME or
// NAME=VALUE) that names no setting of 'handoff agent'.
func checkSettingNames(t *testing.T, where string, env []string) {
	t.Helper()
	valid := map[string]bool{}
	var c Config
	agentFlags(&c).VisitAll(func(f *flag.Flag) { valid[envName(f.Name)] = true })
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "HANDOFF_") && !valid[name] {
			t.Errorf("%s: %s is not a setting of 'handoff agent' (see docs/flags.md)", where, name)
		}
	}
}

// TestDockerfileBuild runs the Dockerfile's go build line, checks that the
// binary is static, and runs it with the image's environment.
func TestDockerfileBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary as the Dockerfile does")
	}
	df := parseDockerfile(t)
	img := checkDockerfile(t, df)
	var line, out string
	for _, run := range df.stages[0].all("RUN") {
		if m := goBuildLine.FindStringSubmatch(run); m != nil {
			line, out = m[0], m[1]
		}
	}
	// Build in a copy of what the build context holds, so that a file
	// .dockerignore leaves out but the build needs fails here too.
	src := buildContext(t)
	bin := filepath.Join(t.TempDir(), "handoff")
	cmd := exec.Command("sh", "-c", strings.Replace(line, "-o "+out, "-o "+bin, 1))
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, b)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: the binary needs a dynamic loader; the distroless static image has none", line)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s: the binary links %q", line, libs)
	}

	// The image's environment gives a valid configuration.
	run := exec.Command(bin, "agent", "--print-config")
	run.Env = img.env
	b, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("handoff agent --print-config with %q: %v\n%s", img.env, err, b)
	}
	if want := "data-dir: " + img.dataDir + "\n"; !strings.Contains(string(b), want) {
		t.Errorf("handoff agent --print-config with %q printed\n%s\nwant %q", img.env, b, want)
	}
}

// buildContext copies the files docker build sends (the repository but
// what .dockerignore excludes) to a temporary directory and returns it.
func buildContext(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") || strings.Contains(strings.TrimPrefix(l, "**/"), "**") {
			t.Fatalf(".dockerignore: this test reads plain patterns and leading **/ only, not %q", l)
		}
		patterns = append(patterns, filepath.Clean(l))
	}
	// ignored reports whether a pattern matches rel or, for **/ patterns,
	// a tail of it. A matched directory is skipped whole.
	ignored := func(rel string) bool {
		parts := strings.Split(rel, "/")
		for _, p := range patterns {
			if tail, ok := strings.CutPrefix(p, "**/"); ok {
				for i := range parts {
					if m, _ := filepath.Match(tail, strings.Join(parts[i:], "/")); m {
						return true
					}
				}
			} else if m, _ := filepath.Match(p, rel); m {
				return true
			}
		}
		return false
	}
	dst := t.TempDir()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case ignored(rel) && d.IsDir():
			return filepath.SkipDir
		case ignored(rel):
			return nil
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatalf("copy the build context: %v", err)
	}
	for _, need := range []string{"go.mod", "go.sum", "cmd/handoff/main.go"} {
		if _, err := os.Stat(filepath.Join(dst, need)); err != nil {
			t.Fatalf(".dockerignore leaves out %s", need)
		}
	}
	return dst
}
