package gossip

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gridsync/gridsync/gossip/internal/streamgate"
)

// memberlistLog turns memberlist's log lines ("[LEVEL] memberlist: ...")
// into structured records, and counts the packets and streams it drops
// before membership sees them: memberlist reports those only in its log,
// so the log is where they are counted. The wording matched is that of
// the pinned memberlist release; a test sends each kind of bad packet.
type memberlistLog struct {
	log     *slog.Logger
	metrics *metrics
	// suspected is called with the member this site's probe failed on:
	// memberlist reports its suspicion only in its log.
	suspected func(member string)
	// refuted is called when memberlist refuted a suspicion or a death of
	// this site: it says so in its log only.
	refuted func()

	mu       sync.Mutex
	lastSaid map[string]time.Time // reject reason -> last log line
	unsaid   map[string]int       // rejects since that line
}

// rejectLogEvery limits the log lines of rejected packets: a peer with a
// wrong key sends several a second.
const rejectLogEvery = 10 * time.Second

func newMemberlistLog(log *slog.Logger, m *metrics, suspected func(string), refuted func()) *memberlistLog {
	return &memberlistLog{log: log, metrics: m, suspected: suspected, refuted: refuted, lastSaid: map[string]time.Time{}, unsaid: map[string]int{}}
}

// suspectLine is memberlist's line when this site's probe of a member
// failed, direct and indirect: "Suspect <name> has failed, no acks
// received".
const suspectPrefix, suspectSuffix = "Suspect ", " has failed, no acks received"

// refutePrefixes start memberlist's lines when it refuted a suspicion or a
// death of this site that reached it.
var refutePrefixes = []string{"Refuting a suspect message", "Refuting a dead message"}

func (l *memberlistLog) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.line(line)
	}
	return len(p), nil
}

func (l *memberlistLog) line(line string) {
	level, msg := slog.LevelInfo, line
	for tag, lv := range map[string]slog.Level{"[DEBUG] ": slog.LevelDebug, "[INFO] ": slog.LevelInfo, "[WARN] ": slog.LevelWarn, "[ERR] ": slog.LevelError, "[ERROR] ": slog.LevelError} {
		if i := strings.Index(line, tag); i >= 0 {
			level, msg = lv, line[i+len(tag):]
			break
		}
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	if strings.HasPrefix(msg, suspectPrefix) && strings.HasSuffix(msg, suspectSuffix) && l.suspected != nil {
		// Not from here: memberlist writes its log under its own locks
		// (the log's, and the node lock for some lines), and acting on
		// a suspicion queues broadcasts and reads the members.
		go l.suspected(strings.TrimSuffix(strings.TrimPrefix(msg, suspectPrefix), suspectSuffix))
	}
	for _, prefix := range refutePrefixes {
		if strings.HasPrefix(msg, prefix) && l.refuted != nil {
			go l.refuted() // not under memberlist's locks either
		}
	}
	if reason := rejectReason(msg); reason != "" {
		l.metrics.rejected.WithLabelValues(reason).Inc()
		l.sayReject(reason, msg)
		return
	}
	l.log.Log(context.Background(), level, "swim_memberlist", "message", msg)
}

// rejectReason classifies a line that reports a dropped packet or stream.
func rejectReason(msg string) string {
	switch {
	case strings.Contains(msg, "no installed keys could decrypt"):
		return streamgate.RejectUnknownKey
	case strings.Contains(msg, "unsupported encryption version"),
		strings.Contains(msg, "remote state is not encrypted"):
		return streamgate.RejectNotEncrypted
	case strings.Contains(msg, "remote state is encrypted and encryption is not configured"):
		return streamgate.RejectEncryptedUnexpected
	case strings.Contains(msg, "unacceptable label"):
		return streamgate.RejectLabel
	case strings.Contains(msg, "Decrypt packet failed"),
		strings.Contains(msg, "invalid checksum for UDP packet"),
		strings.Contains(msg, "missing message type byte"):
		return streamgate.RejectMalformed
	}
	return ""
}

// sayReject logs a rejected packet at most once per reason every
// rejectLogEvery, with how many were dropped silently in between.
func (l *memberlistLog) sayReject(reason, msg string) {
	now := time.Now()
	l.mu.Lock()
	if now.Sub(l.lastSaid[reason]) < rejectLogEvery {
		l.unsaid[reason]++
		l.mu.Unlock()
		return
	}
	suppressed := l.unsaid[reason]
	l.lastSaid[reason], l.unsaid[reason] = now, 0
	l.mu.Unlock()
	l.log.Warn("swim_packet_rejected", "reason", reason, "message", msg, "suppressed_since_last", suppressed)
}
