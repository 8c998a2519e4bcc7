print("askrelay")
