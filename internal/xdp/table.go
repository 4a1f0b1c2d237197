package xdp

import (
	"errors"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"unsafe"

	"github.com/tokenwire/tokenwire/bpf"
)

// The prefix tables' layout is in tokenwire.h ("Prefix tables"); this file
// builds their contents. The program computes the same keys and hashes;
// the differential and table tests catch any disagreement.

const bucketSlots = bpf.XDPBucketSlots

// tableBuckets returns the bucket count of a table sized for capacity
// prefixes: a power of two (the hash is masked) with room for at least
// twice the capacity. Two-choice cuckoo hashing with 4-slot buckets
// builds reliably up to about 90% load, so a full table at 50% almost
// never needs a second seed.
func tableBuckets(capacity uint32) uint32 {
	need := max((capacity+1)/2, 1)
	return 1 << bits.Len32(need-1)
}

// tableEntries is the array size of such a table: the head and the
// buckets.
func tableEntries(capacity uint32) uint32 { return 1 + tableBuckets(capacity) }

// key4 is an IPv4 slot: masked address (host order) << 8 | (length + 1).
type key4 = uint64

// key6 is an IPv6 slot: the masked address's halves in host order and
// the length + 1.
type key6 struct {
	hi, lo uint64
	tag    uint8
}

func makeKey4(p netip.Prefix) key4 {
	a := p.Addr().As4()
	return uint64(uint32(a[0])<<24|uint32(a[1])<<16|uint32(a[2])<<8|uint32(a[3]))<<8 | uint64(p.Bits()+1)
}

func makeKey6(p netip.Prefix) key6 {
	a := p.Addr().As16()
	var hi, lo uint64
	for i := range 8 {
		hi = hi<<8 | uint64(a[i])
		lo = lo<<8 | uint64(a[8+i])
	}
	return key6{hi: hi, lo: lo, tag: uint8(p.Bits() + 1)}
}

// tableShape is what the hashes need to know of a table's size.
type tableShape struct{ mask, shift uint32 }

// shapeOf returns the shape of a table of nBuckets (a power of two)
// buckets: the hash is the top log2(nBuckets) bits of a 64-bit product
// (at least the top bit, masked away for a single bucket, because a shift
// by 64 is not defined).
func shapeOf(nBuckets uint32) tableShape {
	return tableShape{mask: nBuckets - 1, shift: min(64-uint32(bits.Len32(nBuckets-1)), 63)}
}

// hash4 and hash6 are the program's bucket hashes (hit4, hit6):
// multiply-shift with odd random multipliers. The top bits of the product,
// not its middle: a short prefix's key ends in many zero bits, which push
// its information up.
func hash4(k key4, seed uint64, sh tableShape) uint32 {
	return uint32((k*seed)>>sh.shift) & sh.mask
}

func hash6(k key6, seedHi, seedLo uint64, sh tableShape) uint32 {
	return uint32((k.hi*seedHi+(k.lo^uint64(k.tag))*seedLo)>>sh.shift) & sh.mask
}

// cuckoo is a table being built: two candidate buckets per key (which
// says which hash), a key in either. The zero key marks a free slot (no
// real key is zero: its tag is at least 1). The program relies on two
// invariants (hit4, hit6): a bucket's slots fill in order and a filled
// slot is only ever replaced, never emptied, so a full bucket stays full;
// and a key goes to its second bucket only when the first is full.
type cuckoo[K comparable] struct {
	buckets [][bucketSlots]K
	which   func(k K, i int) uint32
}

// maxKicks bounds one insertion's evictions; maxSeeds the rebuilds with
// fresh seeds. At the loads tableBuckets allows, a first attempt fails
// with a probability far below one in a million.
const (
	maxKicks = 500
	maxSeeds = 20
)

var errTableFull = errors.New("no seed placed every prefix in the hash table")

// insert places k, evicting residents along a random walk when both its
// buckets are full; false when the walk gives up (the table is then
// rebuilt from scratch, so the key left in hand does not matter). The
// first bucket is tried first and slots in order, and an eviction puts
// the new key where the old one was: the invariants hold.
func (c *cuckoo[K]) insert(k K, r *rand.Rand) bool {
	var zero K
	for range maxKicks {
		b := [2]uint32{c.which(k, 0), c.which(k, 1)}
		for _, bi := range b {
			for s := range bucketSlots {
				if c.buckets[bi][s] == zero {
					c.buckets[bi][s] = k
					return true
				}
			}
		}
		bi, s := b[r.IntN(2)], r.IntN(bucketSlots)
		k, c.buckets[bi][s] = c.buckets[bi][s], k
	}
	return false
}

// fill places every key, with new seeds (newWhich) until one works.
func fill[K comparable](keys []K, nBuckets uint32, r *rand.Rand, newWhich func() func(K, int) uint32) (*cuckoo[K], error) {
	for range maxSeeds {
		c := &cuckoo[K]{buckets: make([][bucketSlots]K, nBuckets), which: newWhich()}
		ok := true
		for _, k := range keys {
			if !c.insert(k, r) {
				ok = false
				break
			}
		}
		if ok {
			return c, nil
		}
	}
	return nil, errTableFull
}

// tableImage is a built table: the array elements to write (index and
// value); elements not listed stay zero (empty buckets).
type tableImage[V any] struct {
	index []uint32
	value []V
}

func oddSeed(r *rand.Rand) uint64 { return r.Uint64() | 1 }

// build4 builds an IPv4 table of nBuckets buckets holding prefixes
// (distinct, masked, IPv4).
func build4(prefixes []netip.Prefix, nBuckets uint32) (tableImage[bpf.XDPBucket4], error) {
	var img tableImage[bpf.XDPBucket4]
	var head bpf.XDPHead4
	sh := shapeOf(nBuckets)
	head.Mask, head.Shift = sh.mask, sh.shift
	keys := make([]key4, len(prefixes))
	for i, p := range prefixes {
		keys[i] = makeKey4(p)
		head.Lens |= 1 << (32 - p.Bits())
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	c, err := fill(keys, nBuckets, r, func() func(key4, int) uint32 {
		head.Seed = [2]uint64{oddSeed(r), oddSeed(r)}
		seed := head.Seed
		return func(k key4, i int) uint32 { return hash4(k, seed[i], sh) }
	})
	if err != nil {
		return img, err
	}
	var first bpf.XDPBucket4
	*(*bpf.XDPHead4)(unsafe.Pointer(&first)) = head
	img.index, img.value = append(img.index, 0), append(img.value, first)
	for bi, b := range c.buckets {
		if b != [bucketSlots]key4{} {
			img.index = append(img.index, uint32(1+bi))
			img.value = append(img.value, bpf.XDPBucket4{Slot: b})
		}
	}
	return img, nil
}

// build6 is build4 for IPv6.
func build6(prefixes []netip.Prefix, nBuckets uint32) (tableImage[bpf.XDPBucket6], error) {
	var img tableImage[bpf.XDPBucket6]
	var head bpf.XDPHead6
	sh := shapeOf(nBuckets)
	head.Mask, head.Shift = sh.mask, sh.shift
	keys := make([]key6, len(prefixes))
	for i, p := range prefixes {
		keys[i] = makeKey6(p)
		switch l := p.Bits(); {
		case l > 64:
			head.Lens[0] |= 1 << (128 - l)
		case l > 0:
			head.Lens[1] |= 1 << (64 - l)
		default:
			head.Lens[2] |= 1
		}
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	c, err := fill(keys, nBuckets, r, func() func(key6, int) uint32 {
		head.Seed = [4]uint64{oddSeed(r), oddSeed(r), oddSeed(r), oddSeed(r)}
		seed := head.Seed
		return func(k key6, i int) uint32 { return hash6(k, seed[2*i], seed[2*i+1], sh) }
	})
	if err != nil {
		return img, err
	}
	var first bpf.XDPBucket6
	*(*bpf.XDPHead6)(unsafe.Pointer(&first)) = head
	img.index, img.value = append(img.index, 0), append(img.value, first)
	for bi, b := range c.buckets {
		if b == [bucketSlots]key6{} {
			continue
		}
		var v bpf.XDPBucket6
		for s, k := range b {
			v.Hi[s], v.Lo[s], v.Len[s] = k.hi, k.lo, k.tag
		}
		img.index = append(img.index, uint32(1+bi))
		img.value = append(img.value, v)
	}
	return img, nil
}

// The heads are written into an element of bucket type.
var (
	_ [unsafe.Sizeof(bpf.XDPBucket4{}) - unsafe.Sizeof(bpf.XDPHead4{})]byte
	_ [unsafe.Sizeof(bpf.XDPBucket6{}) - unsafe.Sizeof(bpf.XDPHead6{})]byte
)
