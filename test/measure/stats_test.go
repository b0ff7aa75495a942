package measure

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPercentileIsNearestRank(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	require.Equal(t, 5.0, Percentile(v, 50))
	require.Equal(t, 10.0, Percentile(v, 99))
	require.Equal(t, 10.0, Percentile(v, 100))
	require.Equal(t, 1.0, Percentile(v, 0))
	require.Equal(t, 1.0, Percentile(v, 10))
	require.Equal(t, 2.0, Percentile(v, 11))
	require.Equal(t, 0.0, Percentile(nil, 50))
	require.Equal(t, []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}, v, "the input is not reordered")
	require.Equal(t, 5.5, Mean(v))
}

func TestProcessFiguresOfThisProcess(t *testing.T) {
	pid := os.Getpid()
	rss, err := RSSMiB(pid)
	require.NoError(t, err)
	peak, err := PeakRSSMiB(pid)
	require.NoError(t, err)
	require.Positive(t, rss)
	require.GreaterOrEqual(t, peak, rss)
	burn := 0
	for i := range 20_000_000 {
		burn += i % 7
	}
	cpu, err := CPU(pid)
	require.NoError(t, err)
	require.Positive(t, cpu, burn)
	_, err = RSSMiB(1 << 30)
	require.Error(t, err)
}
