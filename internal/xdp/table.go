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

// The length index (tokenwire.h, "Prefix tables") has a slot per key,
// folded by the key's low bits: IPv4 keys are /16s, at most 2^16 slots,
// twice the buckets (4 bytes each); IPv6 keys are /32s, as many slots as
// buckets (16 bytes each). Either adds a quarter to the buckets' memory.
const (
	indexKeyBits4 = 16
	indexKeyBits6 = 32
)

// indexSlots returns the length index's slot count in a table of nBuckets
// buckets; the program's slot is the key masked with indexSlots - 1.
func indexSlots(nBuckets uint32, v6 bool) uint32 {
	if v6 {
		return nBuckets
	}
	return min(1<<indexKeyBits4, 2*nBuckets)
}

// indexElements returns how many array elements the length index takes.
func indexElements(nBuckets uint32, v6 bool) uint32 {
	per := uint32(bpf.XDPIndex4Slots)
	if v6 {
		per = uint32(bpf.XDPIndex6Slots)
	}
	return (indexSlots(nBuckets, v6) + per - 1) / per
}

// tableEntries is the array size of such a table: the head, the buckets
// and the length index.
func tableEntries(capacity uint32, v6 bool) uint32 {
	nb := tableBuckets(capacity)
	return 1 + nb + indexElements(nb, v6)
}

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

// lengthIndex builds a table's length index: per slot, the bitmaps of
// the lengths whose prefixes contain an address of a key in that slot,
// laid out as the head's lens (IPv4: word 0; IPv6: both words). Length 0
// stays in the head. A prefix at least as long as the key sets one slot.
// A shorter one sets the slots of every key it covers, or every slot at
// once for its length when that length's prefixes cover as many keys as
// there are slots: the work per length is bounded by the slot count,
// whatever the list.
type lengthIndex struct {
	keyBits int
	mask    uint64 // slots - 1
	slots   [][2]uint64
	all     [2]uint64 // lengths set in every slot
}

func newLengthIndex(nBuckets uint32, v6 bool, prefixes []netip.Prefix) *lengthIndex {
	n := indexSlots(nBuckets, v6)
	x := &lengthIndex{keyBits: indexKeyBits4, mask: uint64(n - 1), slots: make([][2]uint64, n)}
	if v6 {
		x.keyBits = indexKeyBits6
	}
	short := map[int]uint64{} // keys covered per short length
	for _, p := range prefixes {
		if l := p.Bits(); l > 0 && l < x.keyBits {
			short[l] += 1 << (x.keyBits - l)
		}
	}
	for _, p := range prefixes {
		l := p.Bits()
		if l == 0 {
			continue
		}
		w, b := lengthBit(l, v6)
		k := x.keyOf(p)
		switch {
		case l >= x.keyBits:
			x.slots[k&x.mask][w] |= b
		case short[l] >= uint64(n):
			x.all[w] |= b
		default:
			for i := range uint64(1) << (x.keyBits - l) {
				x.slots[(k+i)&x.mask][w] |= b
			}
		}
	}
	return x
}

// lengthBit returns the word and bit of length l in a lens bitmap: 0..32
// for IPv4 (/0 is bit 32), 1..128 for IPv6 (whose head keeps /0 in a word
// of its own).
func lengthBit(l int, v6 bool) (int, uint64) {
	switch {
	case !v6:
		return 0, 1 << (32 - l)
	case l > 64:
		return 0, 1 << (128 - l)
	default:
		return 1, 1 << (64 - l)
	}
}

// keyOf returns the index key of p's address: its first keyBits bits.
func (x *lengthIndex) keyOf(p netip.Prefix) uint64 {
	if p.Addr().Is4() {
		return uint64(makeKey4(p) >> (8 + 32 - x.keyBits))
	}
	return makeKey6(p).hi >> (64 - x.keyBits)
}

// slot returns slot i's bitmaps.
func (x *lengthIndex) slot(i int) [2]uint64 {
	if i >= len(x.slots) {
		return [2]uint64{} // the last element's unused slots
	}
	return [2]uint64{x.slots[i][0] | x.all[0], x.slots[i][1] | x.all[1]}
}

// elements4 and elements6 append the index's elements, after nBuckets
// buckets, to img (all-zero elements are left out: the array's default).
func (x *lengthIndex) elements4(img *tableImage[bpf.XDPBucket4], nBuckets uint32) {
	const per = bpf.XDPIndex4Slots
	for e := range indexElements(nBuckets, false) {
		var ix bpf.XDPIndex4
		for j := range per {
			ix.Lens[j] = uint32(x.slot(int(e)*per + j)[0])
		}
		if ix != (bpf.XDPIndex4{}) {
			img.index = append(img.index, 1+nBuckets+e)
			img.value = append(img.value, *(*bpf.XDPBucket4)(unsafe.Pointer(&ix)))
		}
	}
}

func (x *lengthIndex) elements6(img *tableImage[bpf.XDPBucket6], nBuckets uint32) {
	const per = bpf.XDPIndex6Slots
	for e := range indexElements(nBuckets, true) {
		var ix bpf.XDPIndex6
		for j := range per {
			s := x.slot(int(e)*per + j)
			ix.Lens[2*j], ix.Lens[2*j+1] = s[0], s[1]
		}
		if ix != (bpf.XDPIndex6{}) {
			img.index = append(img.index, 1+nBuckets+e)
			img.value = append(img.value, *(*bpf.XDPBucket6)(unsafe.Pointer(&ix)))
		}
	}
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
		_, b := lengthBit(p.Bits(), false)
		head.Lens |= b
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
	newLengthIndex(nBuckets, false, prefixes).elements4(&img, nBuckets)
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
		if l := p.Bits(); l > 0 {
			w, b := lengthBit(l, true)
			head.Lens[w] |= b
		} else {
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
	newLengthIndex(nBuckets, true, prefixes).elements6(&img, nBuckets)
	return img, nil
}

// The heads are written into an element of bucket type, and so are the
// index elements, which are exactly bucket-sized.
var (
	_ [unsafe.Sizeof(bpf.XDPBucket4{}) - unsafe.Sizeof(bpf.XDPHead4{})]byte
	_ [unsafe.Sizeof(bpf.XDPBucket6{}) - unsafe.Sizeof(bpf.XDPHead6{})]byte
	_ [unsafe.Sizeof(bpf.XDPBucket4{}) - unsafe.Sizeof(bpf.XDPIndex4{})]byte
	_ [unsafe.Sizeof(bpf.XDPIndex4{}) - unsafe.Sizeof(bpf.XDPBucket4{})]byte
	_ [unsafe.Sizeof(bpf.XDPBucket6{}) - unsafe.Sizeof(bpf.XDPIndex6{})]byte
	_ [unsafe.Sizeof(bpf.XDPIndex6{}) - unsafe.Sizeof(bpf.XDPBucket6{})]byte
)
