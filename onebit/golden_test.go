package onebit

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
)

// The golden vectors come from our own NumPy model of the algorithm.
// Regenerate them from the repository root with
//
//	/usr/bin/python3 onebit/reference/onebit_ref.py > testdata/onebit/golden.json
const goldenPath = "../testdata/onebit/golden.json"

type goldenStep struct {
	Inputs       [][]byte `json:"inputs"`
	Output       []byte   `json:"output"`
	WorkerScales []byte   `json:"worker_scales"`
	WorkerSigns  [][]byte `json:"worker_signs"`
	ServerScales []byte   `json:"server_scales"`
	ServerSigns  []byte   `json:"server_signs"`
}

type goldenCase struct {
	Name         string       `json:"name"`
	N            int          `json:"n"`
	World        int          `json:"world"`
	Padded       int          `json:"padded"`
	Steps        []goldenStep `json:"steps"`
	WorkerErrors [][]byte     `json:"worker_errors"`
	ServerErrors [][]byte     `json:"server_errors"`
}

func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// closeTo compares to float32 rounding: a few ulps relative to ref, the
// magnitude the value is made of (a scale), since differences in how the
// sum of squares is rounded shift every value by about one ulp of it.
func closeTo(got, want []float32, ref float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		tol := 4e-7*(math.Abs(float64(want[i]))+ref) + 1e-30
		if math.Abs(float64(got[i])-float64(want[i])) > tol {
			return fmt.Errorf("[%d] = %g, want %g", i, got[i], want[i])
		}
	}
	return nil
}

func maxAbs(v []float32) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, math.Abs(float64(x)))
	}
	return m
}

func loadGolden(t *testing.T) []goldenCase {
	t.Helper()
	b, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	var g struct{ Cases []goldenCase }
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g.Cases
}

func TestGolden(t *testing.T) {
	for _, gc := range loadGolden(t) {
		t.Run(gc.Name, func(t *testing.T) {
			p := gc.World
			w := newFakeWorld(p)
			states := make([]*State, p)
			for r := range states {
				st, err := NewState(gc.N, p)
				if err != nil {
					t.Fatal(err)
				}
				if st.PaddedLen() != gc.Padded {
					t.Fatalf("PaddedLen = %d, want %d", st.PaddedLen(), gc.Padded)
				}
				states[r] = st
			}
			for s, gs := range gc.Steps {
				outs := make([][]float32, p)
				if err := w.run(func(c *fakeComm) error {
					outs[c.rank] = f32s(gs.Inputs[c.rank])
					return CompressedAllReduce(context.Background(), c, outs[c.rank], states[c.rank])
				}); err != nil {
					t.Fatal(err)
				}
				wscales, sscales := f32s(gs.WorkerScales), f32s(gs.ServerScales)
				for r, st := range states {
					if got := st.WorkerSigns(); !bytes.Equal(got, gs.WorkerSigns[r]) {
						t.Fatalf("step %d rank %d: worker signs %x, want %x", s, r, got, gs.WorkerSigns[r])
					}
					if got := st.ServerSigns(); !bytes.Equal(got, gs.ServerSigns) {
						t.Fatalf("step %d rank %d: server signs %x, want %x", s, r, got, gs.ServerSigns)
					}
					ws, _ := st.WorkerScale()
					ss, _ := st.ServerScale()
					if err := closeTo([]float32{ws, ss}, []float32{wscales[r], sscales[r]}, 0); err != nil {
						t.Fatalf("step %d rank %d: own worker and server scales: %v", s, r, err)
					}
					if err := closeTo(st.WorkerScales(), wscales, 0); err != nil {
						t.Fatalf("step %d rank %d: worker scales: %v", s, r, err)
					}
					if err := closeTo(st.ServerScales(), sscales, 0); err != nil {
						t.Fatalf("step %d rank %d: server scales: %v", s, r, err)
					}
					if err := closeTo(outs[r], f32s(gs.Output), 0); err != nil {
						t.Fatalf("step %d rank %d: output: %v", s, r, err)
					}
				}
			}
			for r, st := range states {
				we, se := f32s(gc.WorkerErrors[r]), f32s(gc.ServerErrors[r])
				if err := closeTo(st.WorkerError(), we, maxAbs(we)); err != nil {
					t.Errorf("rank %d: worker error: %v", r, err)
				}
				if err := closeTo(st.ServerError(), se, maxAbs(se)); err != nil {
					t.Errorf("rank %d: server error: %v", r, err)
				}
			}
		})
	}
}
