package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
)

// progress shows how far the bench has come on stderr: a bar redrawn
// in place on a terminal, one line per phase otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	runs  int
	start time.Time

	mu    sync.Mutex
	run   int
	mode  string
	what  string
	frac  float64
	width int // of the last line drawn in place
}

func newProgress(w io.Writer, runs int) *progress {
	p := &progress{w: w, runs: runs, start: time.Now()}
	if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		p.tty = true
	}
	return p
}

// startRun starts mode's run, the i-th of the bench.
func (p *progress) startRun(i int, mode string) {
	p.mu.Lock()
	p.run, p.mode, p.what, p.frac = i, mode, "starting", 0
	p.mu.Unlock()
	p.draw()
}

// phase names what the run does now and how far into the run that is (0-1).
func (p *progress) phase(what string, frac float64) {
	p.mu.Lock()
	p.what, p.frac = what, frac
	p.mu.Unlock()
	p.draw()
}

// note prints a line that stays.
func (p *progress) note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	fmt.Fprintf(p.w, "bench: "+format+"\n", args...)
}

func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	fmt.Fprintf(p.w, "bench: done in %s\n", time.Since(p.start).Round(100*time.Millisecond))
}

func (p *progress) clearLocked() {
	if p.tty && p.width > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
		p.width = 0
	}
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	total := (float64(p.run) + p.frac) / float64(p.runs)
	const width = 24
	n := int(total*width + 0.5)
	line := fmt.Sprintf("bench [%s%s] %3.0f%%  %s (%d/%d): %s  %s", strings.Repeat("#", n), strings.Repeat("-", width-n),
		100*total, p.mode, p.run+1, p.runs, p.what, time.Since(p.start).Round(time.Second))
	if !p.tty {
		fmt.Fprintln(p.w, line)
		return
	}
	p.clearLocked()
	fmt.Fprint(p.w, line)
	p.width = len([]rune(line))
}
