// The SWIM keys of every network installed into memberlist's keyring,
// live: a rotation needs no restart.

package gossip

import (
	"slices"
	"sort"

	"github.com/hashicorp/memberlist"

	"github.com/gridsync/gridsync/gossip/swimkeys"
)

// desiredKeys is the keyring the networks and the environment ask for:
// the environment's key is primary while set, else the primary of the
// first network (by name) with a key; every key of every network
// decrypts. One membership serves every network of the site.
func (r *Runtime) desiredKeys() (primary []byte, all [][]byte) {
	if r.cfg.EnvKey != nil {
		primary = r.cfg.EnvKey
		all = append(all, r.cfg.EnvKey)
	}
	names := make([]string, 0, len(r.netKeys))
	for n := range r.netKeys {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ks := r.netKeys[n]
		if primary == nil {
			primary = ks.Primary
		}
		for _, k := range ks.All() {
			if !swimkeys.Contains(all, k) {
				all = append(all, k)
			}
		}
	}
	return primary, all
}

func (r *Runtime) buildKeyring() (*memberlist.Keyring, error) {
	r.mu.Lock()
	primary, all := r.desiredKeys()
	r.mu.Unlock()
	var others [][]byte
	for _, k := range all {
		if !slices.Equal(k, primary) {
			others = append(others, k)
		}
	}
	return memberlist.NewKeyring(others, primary)
}

// applyKeys brings the live keyring to the desired keys: new keys are
// installed first, then the primary switched, then retired keys removed,
// so that no packet in flight is refused. With no key left configured the
// last ones stay: a running membership never falls back to the clear.
func (r *Runtime) applyKeys() {
	r.mu.Lock()
	kr := r.keyring
	primary, all := r.desiredKeys()
	r.mu.Unlock()
	if kr == nil || primary == nil {
		return
	}
	installed := kr.GetKeys()
	for _, k := range all {
		if !swimkeys.Contains(installed, k) {
			if err := kr.AddKey(k); err != nil {
				r.log.Error("swim_key_install_failed", "error", err)
				return
			}
			r.log.Info("swim_key_installed", "keys", len(kr.GetKeys()))
		}
	}
	if !slices.Equal(kr.GetPrimaryKey(), primary) {
		if err := kr.UseKey(primary); err != nil {
			r.log.Error("swim_key_switch_failed", "error", err)
			return
		}
		r.log.Info("swim_primary_key_switched", "keys", len(kr.GetKeys()))
	}
	for _, k := range kr.GetKeys() {
		if !swimkeys.Contains(all, k) {
			if err := kr.RemoveKey(k); err != nil {
				r.log.Error("swim_key_remove_failed", "error", err)
				continue
			}
			r.log.Info("swim_key_removed", "keys", len(kr.GetKeys()))
		}
	}
	r.metrics.keysInstalled.Set(float64(len(kr.GetKeys())))
}

// SetNetworkKeys records a network's SWIM keys: ks nil means the network
// declares no key (which alone releases the hold to the clear), failed
// means it declares one that did not load (which keeps the hold, and never
// lets the clear in).
func (r *Runtime) SetNetworkKeys(network string, ks *swimkeys.Set, failed bool) {
	r.mu.Lock()
	delete(r.netKeys, network)
	delete(r.netKeyFail, network)
	delete(r.netNoKey, network)
	switch {
	case failed:
		r.netKeyFail[network] = true
	case ks != nil:
		r.netKeys[network] = ks
	default:
		r.netNoKey[network] = true
	}
	r.mu.Unlock()
	r.updateKeyPending()
	r.poke()
}
