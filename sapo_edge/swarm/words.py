"""The 256 words of short admission codes ('7-guitarist-revenge' style): each word is 8 bits.
Chosen to be common, distinct and easy to type and say aloud."""

WORDS = tuple(
    """
    acorn adrift almond amber anchor apple apron arctic arrow aspen atlas autumn avocado badge
    bagel bamboo banjo barley basil beacon beaver berry bicycle biscuit blanket blossom bonfire
    bottle boulder bramble breeze brick bridge bronze bubble bucket buffalo bugle butter cabin
    cactus camel candle canoe canyon carrot castle cedar cello cherry chess chimney cider
    cinnamon circus citrus clover cobalt coconut comet compass copper coral cotton cougar coyote
    cradle crater cricket crystal cupcake daisy dolphin domino dragon drum dune eagle easel echo
    eclipse elbow elder ember emerald engine falcon feather fennel ferry fiddle finch fjord
    flannel flute forest fossil fountain fox galaxy garden garlic gazelle geyser ginger glacier
    globe gopher granite grape gravel guitar hammock harbor harvest hazel hedgehog helmet heron
    hickory honey horizon husky iceberg igloo indigo iris island ivory jacket jaguar jasmine
    jelly jigsaw juniper kayak kettle kiwi koala ladder lagoon lantern lemon lentil lilac lime
    linen lizard lobster locket lotus lunar magnet mango maple marble meadow melon meteor mint
    mitten monsoon mosaic moss muffin mustard nectar nickel nutmeg oasis oatmeal ocean olive
    onion orbit orchid otter owl paddle panda papaya parsley pebble pelican pepper piano pickle
    pine pixel plum pocket pony poppy prairie pretzel puffin pumpkin quartz quilt rabbit radish
    rainbow raisin raven reef ribbon river robin rocket saffron sailor salmon satchel scarf
    sequoia shadow sherbet silver sketch sloth snowman sparrow spinach sprout squash starling
    summit sunset tango teapot thistle thunder tiger toffee tomato topaz tulip tundra turnip
    twig umbrella valley velvet violet volcano waffle walnut walrus willow window wombat yogurt
    zebra zephyr zigzag zinnia
    """.split()
)
assert len(WORDS) == 256 and len(set(WORDS)) == 256
