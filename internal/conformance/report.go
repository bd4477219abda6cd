package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Report is the outcome of a run.
type Report struct {
	// Passed says no case failed; skipped cases do not count.
	Passed bool `json:"passed"`
	// Job is the job the worker was judged on (JobCount or JobOwn).
	Job   string `json:"job"`
	Cases []Case `json:"cases"`
	// Notes are the run's steps that did not complete; cases that could
	// not be exercised point at them.
	Notes []string `json:"notes,omitempty"`
	// Worker is how the worker ended.
	Worker string `json:"worker"`
	// Dir holds the agents' and the worker's logs; it is kept when a case
	// failed or when it was given.
	Dir       string   `json:"dir,omitempty"`
	WorkerLog []string `json:"workerLog,omitempty"` // its last lines, when a case failed
	Duration  string   `json:"duration"`
}

// Case is one case's verdict.
type Case struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Passed bool   `json:"passed"`
	// Skipped says the run did not judge the case: it needs the counting
	// job, and the worker does a job of its own. Reason says so.
	Skipped bool `json:"skipped,omitempty"`
	// Reason says what the worker did wrong, and what to do instead, or
	// why the case was skipped.
	Reason string `json:"reason,omitempty"`
}

// Failed returns the IDs of the failed cases.
func (rep Report) Failed() []string {
	var out []string
	for _, c := range rep.Cases {
		if !c.Passed && !c.Skipped {
			out = append(out, c.ID)
		}
	}
	return out
}

// Skipped returns the IDs of the skipped cases.
func (rep Report) Skipped() []string {
	var out []string
	for _, c := range rep.Cases {
		if c.Skipped {
			out = append(out, c.ID)
		}
	}
	return out
}

func (r *run) report() Report {
	calls := r.rec.snapshot()
	v := r.judge(calls)
	if err := writeCalls(filepath.Join(r.dir, "calls.jsonl"), calls); err != nil {
		r.notes = append(r.notes, err.Error())
	}
	rep := Report{Passed: len(v) == 0, Job: r.o.Job, Notes: r.notes, Worker: r.worker.status(), Dir: r.dir}
	if r.killed {
		rep.Worker = "killed by the run (it had not exited)"
	}
	for _, c := range Cases(r.o.Job) {
		if !c.Skipped {
			reason, failed := v[c.ID]
			c.Reason, c.Passed = reason, !failed
		}
		rep.Cases = append(rep.Cases, c)
	}
	if !rep.Passed {
		rep.WorkerLog = r.worker.tail(20)
	}
	return rep
}

// WriteText writes the report as a table with the reason of each failure.
func (rep Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRESULT\tCHECKS")
	for _, c := range rep.Cases {
		res := "pass"
		switch {
		case c.Skipped:
			res = "skip"
		case !c.Passed:
			res = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.ID, res, c.Title)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	for _, c := range rep.Cases {
		if !c.Passed && !c.Skipped {
			fmt.Fprintf(&b, "\n%s: %s\n", c.ID, c.Reason)
		}
	}
	for _, c := range rep.Cases {
		if c.Skipped {
			fmt.Fprintf(&b, "\n%s (skipped): %s\n", c.ID, c.Reason)
		}
	}
	if len(rep.Notes) > 0 {
		b.WriteString("\nsteps that did not complete:\n")
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	fmt.Fprintf(&b, "\nworker: %s; run took %s\n", rep.Worker, rep.Duration)
	if !rep.Passed {
		if len(rep.WorkerLog) > 0 {
			b.WriteString("last lines of the worker's output:\n")
			for _, l := range rep.WorkerLog {
				fmt.Fprintf(&b, "  | %s\n", l)
			}
		}
		fmt.Fprintf(&b, "the worker's calls (calls.jsonl) and the logs (worker.log, agents.log) are in %s\n", rep.Dir)
		fmt.Fprintf(&b, "FAIL: %d of %d cases (the %s job)\n", len(rep.Failed()), len(rep.Cases)-len(rep.Skipped()), rep.Job)
	} else {
		fmt.Fprintf(&b, "PASS: all %d cases (the %s job)\n", len(rep.Cases)-len(rep.Skipped()), rep.Job)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as one JSON object.
func (rep Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// Cases lists the cases a run of job judges, in order, without verdicts;
// a case the job skips is Skipped, with the reason.
func Cases(job string) []Case {
	out := make([]Case, len(caseTitles))
	for i, ct := range caseTitles {
		out[i] = Case{ID: ct.id, Title: ct.title}
		if job == JobOwn {
			if ct.own != "" {
				out[i].Title = ct.own
			}
			if ct.skip != "" {
				out[i].Skipped, out[i].Reason = true, ct.skip
			}
		}
	}
	return out
}
