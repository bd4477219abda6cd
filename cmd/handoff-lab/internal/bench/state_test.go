package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestStateBench runs a tiny state scenario, in one process and as
// processes, and checks its structure: every operation measured through
// Pebble, the floor and the API in each encoding, transport and key
// distribution, each row as many times as asked, none with an error, and
// the targets reported. It asserts no wall-clock figure.
func TestStateBench(t *testing.T) {
	if testing.Short() {
		t.Skip("runs agents")
	}
	for _, processes := range []bool{false, true} {
		name := "in-process"
		if processes {
			name = "processes"
		}
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			e := Env{Stdout: &out, Stderr: &errOut}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			args := []string{"--scenario", "state", "--state-keys", "300", "--state-tasks", "1,2", "--state-batch", "10",
				"--state-duration", "100ms", "--state-repeat", "2", "--hold", "100ms", "--json"}
			if processes {
				args = append(args, "--processes")
			}
			if err := Run(ctx, args, e); err != nil {
				t.Fatalf("handoff-lab bench %q: %v\nstderr:\n%s", args, err, errOut.String())
			}
			var res stateResults
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("--json output does not decode: %v\n%s", err, out.String())
			}
			want := map[string]int{}
			for _, tasks := range []int{1, 2} {
				for _, op := range []string{opRead, opBatch, opCommit, opRMW} {
					dists := []string{distUniform, distZipf}
					if op == opCommit {
						dists = []string{""}
					}
					for _, dist := range dists {
						want[key(op, viaPebble, "", "", dist, tasks)]++
						for _, tr := range []string{"tcp", "unix"} {
							want[key(op, viaFloor, tr, "", dist, tasks)]++
							if op == opRead {
								want[key(op, viaAPI, tr, "", dist, tasks)]++
								continue
							}
							for _, enc := range []string{"json", "binary"} {
								want[key(op, viaAPI, tr, enc, dist, tasks)]++
							}
						}
					}
				}
			}
			got := map[string]int{}
			for _, row := range res.Rows {
				got[key(row.Op, row.Via, row.Transport, row.Encoding, row.Dist, row.Tasks)]++
				if row.Errors != 0 || row.Ops == 0 || row.Items < row.Ops {
					t.Errorf("%s via %s %s %s, %d tasks: %d calls, %d items, %d errors (%s); want calls and no error",
						row.Op, row.Via, row.Transport, row.Encoding, row.Tasks, row.Ops, row.Items, row.Errors, row.FirstError)
				}
				sp := row.Spread.ItemsPerSec
				if row.Runs != 2 || sp.Min > sp.Median || sp.Median > sp.Max || row.ItemsPerSec != sp.Median || row.Spread.P50.Min > row.Spread.P50.Max {
					t.Errorf("%s via %s %s %s, %d tasks: %d runs, items/s %v of spread %+v, p50 %+v; want 2 runs, the median run's rate and ordered spreads",
						row.Op, row.Via, row.Transport, row.Encoding, row.Tasks, row.Runs, row.ItemsPerSec, sp, row.Spread.P50)
				}
			}
			for k, n := range want {
				if got[k] != n {
					t.Errorf("row %s measured %d times, want %d", k, got[k], n)
				}
			}
			if len(got) != len(want) || res.Error != "" {
				t.Errorf("%d kinds of row, want %d; error %q", len(got), len(want), res.Error)
			}
			var table bytes.Buffer
			if err := writeStateTable(&table, res); err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"Headline figures", "single read, tcp, 1 task", "read-modify-write, unix binary, 1 task(s), zipf keys", "Pebble in process", "pebble"} {
				if !strings.Contains(table.String(), s) {
					t.Errorf("the table lacks %q:\n%s", s, table.String())
				}
			}
		})
	}
}

func key(op, via, transport, encoding, dist string, tasks int) string {
	return strings.Join([]string{op, via, transport, encoding, dist, string(rune('0' + tasks))}, "/")
}

func TestParseState(t *testing.T) {
	s, err := parse([]string{"--scenario", "state"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	st := s.State
	if !slices.Equal(st.Tasks, []int{1, 8}) || st.Keys != 100_000 || st.Batch != 100 || len(st.Ops) != 4 || st.Repeat != 3 ||
		!slices.Equal(st.Dists, []string{distUniform, distZipf}) ||
		!slices.Equal(st.Transports, []string{"tcp", "unix"}) || !slices.Equal(st.Encodings, []string{"json", "binary"}) {
		t.Errorf("defaults = %+v", st)
	}
	for _, args := range [][]string{
		{"--state-tasks", "0"}, {"--state-transports", "udp"}, {"--state-encodings", "xml"}, {"--state-ops", "scan"},
		{"--state-keys", "0"}, {"--state-batch", "10001"}, {"--state-duration", "0s"}, {"--state-encodings", ""},
		{"--state-dists", "normal"}, {"--state-repeat", "0"},
	} {
		if _, err := parse(append([]string{"--scenario", "state"}, args...), io.Discard); err == nil {
			t.Errorf("parse(--scenario state %q) = nil error, want one", args)
		}
	}
}

// TestFloorHandler: the floor reads the request's body and answers the
// bytes asked for, nothing else.
func TestFloorHandler(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(floorHandler))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/get?n=300", "application/octet-stream", strings.NewReader(strings.Repeat("k", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || len(b) != 300 {
		t.Errorf("floor answered %d with %d bytes, want 200 with 300", resp.StatusCode, len(b))
	}
}

// TestZipfKeys: zipf keys stay within the keyspace and a few of them take
// most of the calls; uniform keys do not concentrate.
func TestZipfKeys(t *testing.T) {
	const keys, calls = 100_000, 100_000
	for _, tc := range []struct {
		dist     string
		hotShare func(float64) bool
	}{
		{distZipf, func(f float64) bool { return f > 0.5 }},
		{distUniform, func(f float64) bool { return f < 0.05 }},
	} {
		pick := keyPicker(tc.dist, rand.New(rand.NewPCG(1, 2)), keys)
		counts := map[int]int{}
		for range calls {
			k := pick()
			if k < 0 || k >= keys {
				t.Fatalf("%s: key %d outside 0..%d", tc.dist, k, keys-1)
			}
			counts[k]++
		}
		freq := make([]int, 0, len(counts))
		for _, n := range counts {
			freq = append(freq, n)
		}
		slices.Sort(freq)
		hot := 0
		for _, n := range freq[max(len(freq)-1000, 0):] {
			hot += n
		}
		if share := float64(hot) / calls; !tc.hotShare(share) {
			t.Errorf("%s: the 1,000 most called keys took %.0f%% of the calls", tc.dist, 100*share)
		}
	}
}
