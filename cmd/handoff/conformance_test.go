package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/handoffhq/handoff/internal/conformance"
)

func TestConformanceHelp(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"conformance", "--help"}, &env{stdout: &out, stderr: &out, getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), "help") {
		t.Fatalf("handoff conformance --help: err = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{conformance.EnvSidecarURL, conformance.EnvSidecarToken, conformance.EnvNATSURL, conformance.EnvGroup, conformance.EnvTasks} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not name the worker's variable %s", want)
		}
	}
	for _, c := range conformance.Cases(conformance.JobCount) {
		if !strings.Contains(out.String(), c.ID) {
			t.Errorf("--help does not list case %s", c.ID)
		}
	}
	// Each job is explained, and what --job own skips is named.
	for _, job := range conformance.Jobs() {
		if !strings.Contains(out.String(), "--job "+job) {
			t.Errorf("--help does not explain --job %s", job)
		}
	}
	for _, c := range conformance.Cases(conformance.JobOwn) {
		if c.Skipped && !strings.Contains(out.String(), c.ID+" is skipped") {
			t.Errorf("--help does not say that --job own skips %s", c.ID)
		}
	}
}

func TestConformanceNeedsACommand(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"conformance"}, &env{stdout: &out, stderr: &out, getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), "after --") {
		t.Fatalf("handoff conformance without a command: err = %v, want one that says to give it after --", err)
	}
}
