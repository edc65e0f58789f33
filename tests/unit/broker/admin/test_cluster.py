from broker.admin.cluster import format_versions


def test_api_versions_print_as_kafkas_node_api_versions():
    assert format_versions({18: (0, 3), 3: (0, 12), 9999: (0, 0)}) == (
        "(\n\tMetadata(3): 0 to 12 [usable: 12],\n\tApiVersions(18): 0 to 3 [usable: 3],\n\tUNKNOWN(9999): 0\n)"
    )
