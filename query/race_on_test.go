//go:build race

package query

// raceDetector says the tests run under the race detector, which makes
// the memory test's million-row exports take minutes.
const raceDetector = true
