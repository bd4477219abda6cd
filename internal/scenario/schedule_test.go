package scenario

import (
	"reflect"
	"testing"
	"time"
)

// TestScheduleReproduces checks that a seed gives the same faults (kinds,
// targets, delays) every time, that another seed gives others, that the
// first round injects every kind, and that leaves and joins keep the
// membership within its bounds and name only members that can take them.
func TestScheduleReproduces(t *testing.T) {
	const T = 3 * time.Second
	draw := func(seed uint64, n int) []Fault {
		s := NewSchedule(seed, 3, T)
		out := make([]Fault, n)
		for i := range out {
			out[i] = s.Next()
		}
		return out
	}
	if a, b := draw(42, 200), draw(42, 200); !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 drew two different schedules:\n%v\n%v", a[:5], b[:5])
	}
	if a, b := draw(42, 20), draw(43, 20); reflect.DeepEqual(a, b) {
		t.Errorf("seeds 42 and 43 drew the same schedule: %v", a)
	}
	for seed := uint64(0); seed < 50; seed++ {
		s := NewSchedule(seed, 3, T)
		running := map[string]bool{"m1": true, "m2": true, "m3": true}
		seen := map[FaultKind]bool{}
		for i := 0; i < 300; i++ {
			f := s.Next()
			if i < len(faultKinds) {
				seen[f.Kind] = true
			}
			switch f.Kind {
			case FaultNATS, FaultRolling:
				if f.Member != "" {
					t.Errorf("seed %d fault %d: %s names member %s", seed, f.N, f.Kind, f.Member)
				}
			case FaultJoin:
				if running[f.Member] {
					t.Errorf("seed %d fault %d: join of %s, which runs", seed, f.N, f.Member)
				}
				running[f.Member] = true
			case FaultLeave:
				if !running[f.Member] {
					t.Errorf("seed %d fault %d: leave of %s, which does not run", seed, f.N, f.Member)
				}
				delete(running, f.Member)
			default:
				if !running[f.Member] {
					t.Errorf("seed %d fault %d: %s of %s, which does not run", seed, f.N, f.Kind, f.Member)
				}
			}
			if n := len(running); n < s.MinMembers || n > s.MaxMembers {
				t.Fatalf("seed %d fault %d (%s): %d members run, want %d to %d", seed, f.N, f, n, s.MinMembers, s.MaxMembers)
			}
			if got := s.Running(); len(got) != len(running) {
				t.Fatalf("seed %d fault %d: Running() = %v, want the members %v", seed, f.N, got, running)
			}
			if f.Delay < 0 || f.Delay > 3*T || f.Gap <= 0 {
				t.Errorf("seed %d fault %d: delay %s, gap %s out of range", seed, f.N, f.Delay, f.Gap)
			}
		}
		if len(seen) != len(faultKinds) {
			t.Errorf("seed %d: first round injected %d of the %d kinds: %v", seed, len(seen), len(faultKinds), seen)
		}
	}
}
