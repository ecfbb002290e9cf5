package opstest

import "flag"

var (
	seed      = flag.Uint64("gw.seed", 0, "run only the interface schedule of this seed")
	schedules = flag.Int("gw.schedules", 4, "interface schedules per interface")
)

// Seeds returns the seeds of the randomized schedules to run at an
// interface: -gw.schedules=N of them, or only -gw.seed=N. A failure names
// its seed.
func Seeds() []uint64 {
	if *seed != 0 {
		return []uint64{*seed}
	}
	seeds := make([]uint64, *schedules)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}
