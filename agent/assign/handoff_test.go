package assign

import (
	"slices"
	"testing"
)

// direct marks every member as able to hand tasks over directly.
func direct(ms []Member) []Member {
	out := slices.Clone(ms)
	for i := range out {
		out[i].DirectHandoff = true
	}
	return out
}

// withRecord edits member id's record in a copy of ms.
func withRecord(ms []Member, id string, edit func(*Member)) []Member {
	out := slices.Clone(ms)
	for i := range out {
		if out[i].ID == id {
			edit(&out[i])
		}
	}
	return out
}

// revokedTo is a current assignment of 12 stateful tasks over m1–m3 in which
// s-03, on m1 at epoch 1, is being revoked to m4 at epoch ep (0: through the
// leader) with m4 as its learner.
func revokedTo(ep uint64) Assignment {
	a := placed(5, "s-00=m1", "s-01=m2", "s-02=m3", "s-03=m1", "s-04=m2", "s-05=m3",
		"s-06=m1", "s-07=m2", "s-08=m3", "s-09=m1", "s-10=m2", "s-11=m3")
	a.Tasks["s-03"].Learners = []Learner{{Member: "m4", Since: at(0)}}
	a.Tasks["s-03"].Revoke = &Revoke{Target: "m4", Since: at(1), Reason: reasonBalance, Generation: 5, Epoch: ep}
	if ep > 0 {
		a.Tasks["s-03"].Minted = ep
	}
	return a
}

func TestDirectHandoffs(t *testing.T) {
	four := direct(members("m1", "m2", "m3", "m4"))
	handedOver := withRecord(four, "m1", func(m *Member) {
		m.Released = map[string]Release{"s-03": {Epoch: 1, Seq: 80, At: at(2), Generation: 5, To: "m4", ToEpoch: 2}}
	})
	cancelled := revokedTo(2)
	cancelled.Tasks["s-03"].Revoke = nil // the leader cancelled the revoke before it saw the release
	learning := placed(4, "s-00=m1", "s-01=m2", "s-02=m3", "s-03=m1", "s-04=m2", "s-05=m3",
		"s-06=m1", "s-07=m2", "s-08=m3", "s-09=m1", "s-10=m2", "s-11=m3")
	learning.Tasks["s-03"].Learners = []Learner{{Member: "m4", Since: at(0)}}
	tests := []struct {
		name  string
		in    Input
		want  string // summary of s-03
		epoch uint64 // of s-03's revoke, when it has one
		moves []string
	}{
		{
			name:  "a revoke in a group of direct members carries the epoch minted for its target",
			in:    Input{Config: config(ids("s", 12), ""), Now: at(1), Members: four, Current: learning, Lags: lags("s-03/m4=0")},
			want:  "a=m1 e=1 revoke=m4/balance learners=m4",
			epoch: 2,
			moves: []string{"s-03 revoke m1>m4 balance"},
		},
		{
			name: "a member that cannot read release entries keeps revokes on the leader's path",
			in: Input{Config: config(ids("s", 12), ""), Now: at(1), Current: learning, Lags: lags("s-03/m4=0"),
				Members: withRecord(four, "m2", func(m *Member) { m.DirectHandoff = false })},
			want:  "a=m1 e=1 revoke=m4/balance learners=m4",
			moves: []string{"s-03 revoke m1>m4 balance"},
		},
		{
			name:  "the owner's release entry names the new owner: the plan records it",
			in:    Input{Config: config(ids("s", 12), ""), Now: at(2), Members: handedOver, Current: revokedTo(2)},
			want:  "a=m4 e=2 seq=80",
			moves: []string{"s-03 promote m1>m4 handed-over"},
		},
		{
			name:  "a release entry is final: a revoke cancelled meanwhile does not undo it",
			in:    Input{Config: config(ids("s", 12), ""), Now: at(2), Members: handedOver, Current: cancelled},
			want:  "a=m4 e=2 seq=80",
			moves: []string{"s-03 promote m1>m4 handed-over"},
		},
		{
			name: "the successor reports the takeover before the old owner's record does",
			in: Input{Config: config(ids("s", 12), ""), Now: at(2), Current: revokedTo(2),
				Members: withRecord(four, "m4", func(m *Member) { m.Takeovers = map[string]Takeover{"s-03": {Epoch: 2, Seq: 80, At: at(2)}} })},
			want:  "a=m4 e=2 seq=80",
			moves: []string{"s-03 promote m1>m4 taken-over"},
		},
		{
			name: "the old owner died right after its release entry: the successor's takeover stands, no failover",
			in: Input{Config: config(ids("s", 12), ""), Now: at(2), Current: revokedTo(2),
				Members: withRecord(four[1:], "m4", func(m *Member) { m.Takeovers = map[string]Takeover{"s-03": {Epoch: 2, Seq: 80, At: at(2)}} })},
			want:  "a=m4 e=2 seq=80",
			moves: []string{"s-03 promote m1>m4 taken-over"},
		},
		{
			name: "a takeover at an epoch never minted for the task is ignored",
			in: Input{Config: config(ids("s", 12), ""), Now: at(2), Current: revokedTo(2),
				Members: withRecord(four, "m4", func(m *Member) { m.Takeovers = map[string]Takeover{"s-03": {Epoch: 3, Seq: 80}} })},
			want:  "a=m1 e=1 revoke=m4/balance learners=m4",
			epoch: 2,
		},
		{
			name: "the successor died after the release entry: the task fails over above the entry's epoch",
			in: Input{Config: config(ids("s", 12), ""), Now: at(2), Current: revokedTo(2),
				Members: withRecord(four[:3], "m1", func(m *Member) {
					m.Released = map[string]Release{"s-03": {Epoch: 1, Seq: 80, At: at(2), To: "m4", ToEpoch: 2}}
					m.Positions = map[string]uint64{"s-03": 80}
				})},
			want:  "a=m1 e=3",
			moves: []string{"s-03 promote m1>m4 handed-over", "s-03 failover m4>m1 owner-dead"},
		},
		{
			name:  "a failover after a cancelled direct revoke takes an epoch above the one minted for it",
			in:    Input{Config: config(ids("s", 12), ""), Now: at(2), Current: cancelledMinted(), Members: direct(members("m2", "m3", "m4"))},
			want:  "a=m4 e=3",
			moves: []string{"s-03 failover m1>m4 owner-dead"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Plan(tt.in)
			got := res.Assignment.Tasks["s-03"]
			if s := summary(got); s != tt.want {
				t.Errorf("Plan(in).Tasks[s-03] = %s, want %s", s, tt.want)
			}
			var ep uint64
			if got.Revoke != nil {
				ep = got.Revoke.Epoch
			}
			if ep != tt.epoch {
				t.Errorf("Plan(in).Tasks[s-03].Revoke.Epoch = %d, want %d", ep, tt.epoch)
			}
			if got.Minted != 0 && got.Minted <= got.Epoch {
				t.Errorf("Plan(in).Tasks[s-03].Minted = %d at epoch %d: a minted epoch not above the epoch in force is left out", got.Minted, got.Epoch)
			}
			if tt.moves != nil {
				var mine []string
				for _, l := range moveLines(res.Moves) {
					if len(l) > 4 && l[:5] == "s-03 " {
						mine = append(mine, l)
					}
				}
				if !slices.Equal(mine, tt.moves) {
					t.Errorf("Plan(in) moves of s-03 = %q, want %q", mine, tt.moves)
				}
			}
		})
	}
}

// cancelledMinted is revokedTo(2) after its revoke was cancelled before a
// release (the epoch 2 was minted and never taken), with its owner m1 dead.
func cancelledMinted() Assignment {
	a := revokedTo(2)
	a.Tasks["s-03"].Revoke = nil
	a.Tasks["s-03"].Learners = nil
	return a
}

// TestEpochsAreMintedOnce plans a direct hand-off that is cancelled, then a
// new one, then a failover, and checks that no epoch is given out twice.
func TestEpochsAreMintedOnce(t *testing.T) {
	four := direct(members("m1", "m2", "m3", "m4"))
	in := Input{Config: config(ids("s", 12), ""), Now: at(1), Members: four, Current: revokedTo(2)}
	seen := map[uint64]string{2: "m4"}
	note := func(a Assignment) {
		tk := a.Tasks["s-03"]
		if tk.Revoke != nil && tk.Revoke.Epoch > 0 {
			if m, ok := seen[tk.Revoke.Epoch]; ok && m != tk.Revoke.Target {
				t.Fatalf("epoch %d given to %s and to %s", tk.Revoke.Epoch, m, tk.Revoke.Target)
			}
			seen[tk.Revoke.Epoch] = tk.Revoke.Target
		}
		if m, ok := seen[tk.Epoch]; ok && m != tk.Active && tk.Epoch > 1 {
			t.Fatalf("epoch %d given to %s and to %s", tk.Epoch, m, tk.Active)
		}
		seen[tk.Epoch] = tk.Active
	}
	// m4 leaves: the revoke to it is cancelled.
	in.Members = withRecord(four, "m4", func(m *Member) { m.Leaving = true })
	res := Plan(in)
	note(res.Assignment)
	if tk := res.Assignment.Tasks["s-03"]; tk.Revoke != nil || tk.Minted != 2 {
		t.Fatalf("after m4 leaves, s-03 = %s minted %d, want its revoke cancelled and epoch 2 kept as minted", summary(tk), tk.Minted)
	}
	// m1 dies: the failover must not reuse epoch 2.
	in.Current, in.Now, in.Members = res.Assignment, at(2), direct(members("m2", "m3"))
	res = Plan(in)
	note(res.Assignment)
	if tk := res.Assignment.Tasks["s-03"]; tk.Epoch != 3 {
		t.Fatalf("after m1 dies, s-03 = %s, want epoch 3", summary(tk))
	}
}
